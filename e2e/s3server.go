package e2e

// A real S3-compatible server for the backup tests: versitygw, built from
// the Go module proxy like the other components (components/versitygw),
// run on loopback with its posix backend, which keeps each object as a
// plain file. It checks SigV4 signatures as AWS does, so the operator's
// hand-written signing is tested against a server nobody here wrote.

import (
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"time"
)

// VersitygwVersion is pinned in components/versitygw/go.mod.
const VersitygwVersion = "v1.8.0"

// BuildVersitygw builds versitygw once and returns its path; later calls
// find it in the cache. A cold build takes about 4 minutes on 2 cores.
func BuildVersitygw(out *os.File) (string, error) {
	root, err := RepoRoot()
	if err != nil {
		return "", err
	}
	cache, err := CacheDir()
	if err != nil {
		return "", err
	}
	if err := os.MkdirAll(cache, 0o755); err != nil {
		return "", err
	}
	lock, err := os.OpenFile(filepath.Join(cache, ".lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return "", err
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return "", err
	}
	dir, err := buildModule(out, root, cache, "versitygw", VersitygwVersion, []string{"CGO_ENABLED=0"}, "",
		[]string{"github.com/versity/versitygw/cmd/versitygw"}, []string{"versitygw"}, "about 4 minutes")
	if err != nil {
		return "", err
	}
	return filepath.Join(dir, "versitygw"), nil
}

// S3Server is a running versitygw.
type S3Server struct {
	URL                  string // http://HOST:PORT, path-style
	AccessKey, SecretKey string
	Region               string
	Dir                  string // the posix backend's root: a bucket is a directory
}

// StartS3Server builds (once) and starts versitygw as process name on
// loopback, with a test access key, and waits until it answers.
func (cp *ControlPlane) StartS3Server(name string) (*S3Server, error) {
	return cp.StartS3ServerOn(name, "127.0.0.1")
}

// StartS3ServerOn is StartS3Server listening on host: NodeIP for a server
// that Pods reach too (a restored member's init container fetches its
// backup itself).
func (cp *ControlPlane) StartS3ServerOn(name, host string) (*S3Server, error) {
	bin, err := BuildVersitygw(os.Stdout)
	if err != nil {
		return nil, err
	}
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	s := &S3Server{
		URL:       "http://" + net.JoinHostPort(host, strconv.Itoa(port)),
		AccessKey: "e2e-backup-access", SecretKey: "e2e-backup-secret-key-0123456789",
		Region: "us-east-1",
		Dir:    filepath.Join(cp.Dir, name),
	}
	if err := os.MkdirAll(s.Dir, 0o755); err != nil {
		return nil, err
	}
	args := []string{"--access", s.AccessKey, "--secret", s.SecretKey, "--region", s.Region,
		"--port", net.JoinHostPort(host, strconv.Itoa(port)), "posix", s.Dir}
	if _, err := cp.StartProcess(name, nil, bin, args...); err != nil {
		return nil, err
	}
	// Any HTTP answer (an unsigned request gets 403) means it listens.
	err = Eventually(30*time.Second, name+" answering", func() (bool, error) {
		resp, err := http.Get(s.URL + "/")
		if err != nil {
			if cp.exited(name) {
				return false, fmt.Errorf("%s exited", name)
			}
			return false, nil
		}
		resp.Body.Close()
		return true, nil
	})
	if err != nil {
		return nil, fmt.Errorf("start %s: %v (see %s)", name, err, cp.LogPath(name))
	}
	return s, nil
}

// MakeBucket creates a bucket: with the posix backend, a directory.
func (s *S3Server) MakeBucket(bucket string) error {
	return os.MkdirAll(filepath.Join(s.Dir, bucket), 0o755)
}
