package e2e

// The one way the e2e module runs the operator: as a person would, the
// static binary the README's build line makes, started with flags and
// nothing else. Whatever differs between callers (which namespace, whether
// its requests pass a counting proxy, where a copy of its log goes) is a
// field of OperatorOptions, so that every test, the benchmark and
// cmd/local run the same program the same way.

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
)

// BuildOperator builds the operator as the README says, one static binary
// in cp.Dir, the first time it is called, and returns its path.
func (cp *ControlPlane) BuildOperator() (string, error) {
	cp.buildOperator.Do(func() {
		root, err := RepoRoot()
		if err != nil {
			cp.operatorErr = err
			return
		}
		bin := filepath.Join(cp.Dir, "etcd-operator")
		cmd := exec.Command("go", "build", "-trimpath", "-ldflags=-s -w", "-o", bin, ".")
		cmd.Dir = root
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOWORK=off")
		if out, err := cmd.CombinedOutput(); err != nil {
			cp.operatorErr = fmt.Errorf("build operator: %v\n%s", err, out)
			return
		}
		cp.operator = bin
	})
	return cp.operator, cp.operatorErr
}

// OperatorOptions say how to run one operator process. The zero value is
// the README's quick start: etcd-operator -master=<kubectl proxy>.
type OperatorOptions struct {
	// Name names the process and its log file, Dir/NAME.log (see
	// StopProcess and LogPath); "" is "etcd-operator".
	Name string
	// Master is the operator's -master; "" is kubectl proxy. A counting
	// proxy's URL here counts every request the operator sends.
	Master string
	// Namespace is the operator's -namespace; "" leaves its default.
	Namespace string
	// Flags are any more flags, e.g. -log-level=debug.
	Flags []string
	// Output, when set, gets a copy of the log as it is written.
	Output io.Writer
}

// StartOperator builds the operator (once) and starts it with o.
func (cp *ControlPlane) StartOperator(o OperatorOptions) (*Process, error) {
	bin, err := cp.BuildOperator()
	if err != nil {
		return nil, err
	}
	if o.Name == "" {
		o.Name = "etcd-operator"
	}
	if o.Master == "" {
		o.Master = cp.ProxyURL
	}
	args := []string{"-master=" + o.Master}
	if o.Namespace != "" {
		args = append(args, "-namespace="+o.Namespace)
	}
	return cp.startTee(o.Name, nil, o.Output, bin, append(args, o.Flags...)...)
}
