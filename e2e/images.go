package e2e

// Container images without Docker or a registry. Each image the node
// needs is one static program in an otherwise empty filesystem (as the
// operator's Dockerfile and etcd's own images are), written with
// go-containerregistry as a docker-save tarball and imported into
// containerd. The idea: an image is only layers and a config, so the node
// runs etcd and the operator's image with no network at all.

import (
	"archive/tar"
	"bytes"
	"debug/elf"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// Image is one image the node needs: a single static program in an
// otherwise empty filesystem, as the operator's Dockerfile and etcd's own
// images are. No registry can be reached here, so the node gets them as
// docker-save tarballs imported into containerd.
type Image struct {
	Ref        string // as Pods name it
	Program    string // the file to put in the image
	Path       string // where it lives in the image
	User       string // the image's USER, empty for root
	Entrypoint []string
	// Links are names in Path's directory that lead to Path, as a
	// multi-call program such as busybox has them (sh, mkdir, rm...).
	Links []string
	Env   []string // the image's ENV, e.g. PATH for a shell
	// Also are more programs in Path's directory, by name: etcd's images
	// hold etcdutl beside etcd.
	Also map[string]string
}

// NodeImages are the images every node run imports: the Pod sandbox, etcd
// for each version the tests use, and (when operatorBin is set) the
// operator as the Dockerfile describes it.
func NodeImages(bin Binaries, operatorBin string) []Image {
	imgs := []Image{{Ref: PauseImage, Program: bin.Pause, Path: "/pause", Entrypoint: []string{"/pause"}}}
	for v, etcd := range bin.EtcdImages {
		img := Image{Ref: "gcr.io/etcd-development/etcd:" + v, Program: etcd, Path: "/usr/local/bin/etcd", Entrypoint: []string{"/usr/local/bin/etcd"}}
		if v == EtcdVersion && bin.Etcdutl != "" {
			img.Also = map[string]string{"etcdutl": bin.Etcdutl}
		}
		imgs = append(imgs, img)
	}
	if operatorBin != "" {
		imgs = append(imgs, OperatorImage(operatorBin))
	}
	return imgs
}

// OperatorImageRef is the image examples/deploy.yaml names.
const OperatorImageRef = "etcd-operator:dev"

// OperatorImage is the Dockerfile's image: FROM scratch, the static binary
// at /etcd-operator, USER 65532:65532, ENTRYPOINT ["/etcd-operator"].
func OperatorImage(operatorBin string) Image {
	return Image{Ref: OperatorImageRef, Program: operatorBin, Path: "/etcd-operator", User: "65532:65532", Entrypoint: []string{"/etcd-operator"}}
}

// WriteImage writes img as a docker-save tarball to path.
func WriteImage(img Image, path string) error {
	prog, err := os.ReadFile(img.Program)
	if err != nil {
		return err
	}
	var layer bytes.Buffer
	tw := tar.NewWriter(&layer)
	// The parent directories first, as a Dockerfile's COPY makes them.
	dir := filepath.Dir(img.Path)
	var dirs []string
	for d := dir; d != "/"; d = filepath.Dir(d) {
		dirs = append([]string{d}, dirs...)
	}
	for _, d := range dirs {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: d[1:] + "/", Mode: 0o755}); err != nil {
			return err
		}
	}
	if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: img.Path[1:], Mode: 0o755, Size: int64(len(prog))}); err != nil {
		return err
	}
	if _, err := tw.Write(prog); err != nil {
		return err
	}
	for name, program := range img.Also {
		b, err := os.ReadFile(program)
		if err != nil {
			return err
		}
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: filepath.Join(dir, name)[1:], Mode: 0o755, Size: int64(len(b))}); err != nil {
			return err
		}
		if _, err := tw.Write(b); err != nil {
			return err
		}
	}
	for _, l := range img.Links {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeSymlink, Name: filepath.Join(dir, l)[1:], Linkname: filepath.Base(img.Path), Mode: 0o777}); err != nil {
			return err
		}
	}
	if err := tw.Close(); err != nil {
		return err
	}
	b := layer.Bytes()
	l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil })
	if err != nil {
		return fmt.Errorf("image %s: layer: %w", img.Ref, err)
	}
	i, err := mutate.AppendLayers(empty.Image, l)
	if err != nil {
		return fmt.Errorf("image %s: %w", img.Ref, err)
	}
	cf, err := i.ConfigFile()
	if err != nil {
		return err
	}
	cf = cf.DeepCopy()
	cf.Architecture, cf.OS = runtime.GOARCH, "linux"
	cf.Config = v1.Config{Entrypoint: img.Entrypoint, User: img.User, Env: img.Env}
	if i, err = mutate.ConfigFile(i, cf); err != nil {
		return fmt.Errorf("image %s: config: %w", img.Ref, err)
	}
	tag, err := name.NewTag(img.Ref)
	if err != nil {
		return err
	}
	return tarball.WriteToFile(path, tag, i)
}

// HelperImageRef is a busybox image for the node's helper Pods: the volume
// provisioner's, which make and remove volume directories, and the tests'
// own. The tag is not latest, so the kubelet never tries to pull it.
const HelperImageRef = "etcd-operator-e2e/busybox:static"

// BusyboxImage is busybox made from Debian's busybox-static package
// (installed when /bin/busybox is missing): /bin/busybox with each applet a
// link to it, PATH=/bin, and sh as the entrypoint, like the busybox image
// on Docker Hub.
func BusyboxImage(out io.Writer) (Image, error) {
	const prog = "/bin/busybox"
	if _, err := os.Stat(prog); errors.Is(err, os.ErrNotExist) {
		if err := aptInstall(out, "busybox-static"); err != nil {
			return Image{}, err
		}
	}
	// Alone in an image it must be static: Debian's other busybox
	// package is linked against the C library.
	f, err := elf.Open(prog)
	if err != nil {
		return Image{}, fmt.Errorf("helper image: %w", err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return Image{}, fmt.Errorf("helper image: %s is dynamically linked; the image needs Debian's busybox-static", prog)
		}
	}
	list, err := exec.Command(prog, "--list").Output()
	if err != nil {
		return Image{}, fmt.Errorf("helper image: %s --list: %w", prog, err)
	}
	var links []string
	for _, l := range strings.Fields(string(list)) {
		if l != "busybox" {
			links = append(links, l)
		}
	}
	return Image{Ref: HelperImageRef, Program: prog, Path: "/bin/busybox", Links: links, Env: []string{"PATH=/bin"}, Entrypoint: []string{"/bin/sh"}}, nil
}
