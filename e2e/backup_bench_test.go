package e2e

// The backup benchmark (issue 25): a 512 MiB database on the real node,
// backed up by the operator to versitygw and by `etcdctl snapshot save`
// from the same member, with the operator's RSS sampled while it streams.
// It takes minutes and a few GiB of disk, so it runs only when asked:
//
//	go test -C e2e -count=1 -v -run TestBackupBenchmark -backup-bench .

import (
	"crypto/rand"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

var backupBench = flag.Bool("backup-bench", false, "run TestBackupBenchmark: a 512 MiB database backed up by the operator and by etcdctl snapshot save")

// backupRSSTarget is the most the operator's RSS may grow while it streams
// a backup: the pipeline holds a chunk at a time, whatever the database.
const backupRSSTarget = 16 << 20

func TestBackupBenchmark(t *testing.T) {
	if !*backupBench {
		t.Skip("a benchmark of minutes: run with -backup-bench")
	}
	needNode(t)
	ns := nodeNamespace(t, "backup-bench")
	op := startOperator(t, ns, "")
	d := &day2{t: t, ns: ns, name: "example"}
	d.apply(3, "")
	s := startS3(t, "versitygw-"+ns)
	d.running(3)
	d.secret("s3", map[string]string{"accessKeyID": s.AccessKey, "secretAccessKey": s.SecretKey})

	// 512 values of 1 MiB each (etcd takes requests up to 1.5 MiB), random
	// so that nothing compresses them away.
	start := time.Now()
	value := make([]byte, 1<<20)
	for i := range 512 {
		rand.Read(value)
		if err := d.etcd(d.member(0), "/v3/kv/put", map[string]string{"key": b64(fmt.Sprintf("/bench/%04d", i)), "value": b64(string(value))}, nil); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("wrote 512 MiB in %s", time.Since(start).Round(time.Millisecond))

	// The operator's RSS, sampled while the backup runs: a measurement,
	// not a wait (the backup's end is what the test waits for).
	base, err := rss(op.Pid())
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	peak := base
	stop := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
				if r, err := rss(op.Pid()); err == nil {
					mu.Lock()
					peak = max(peak, r)
					mu.Unlock()
				}
			}
		}
	}()
	d.setBackup(map[string]any{"s3": map[string]any{"endpoint": s.URL, "bucket": "backups", "prefix": "bench", "credentialsSecret": "s3"}, "now": "bench"})
	rec := d.waitBackup("bench")
	close(stop)
	<-sampled
	opTime, err := time.ParseDuration(rec.Duration)
	if err != nil {
		t.Fatal(err)
	}

	// etcdctl against the same member, straight to its Pod IP (the host is
	// on the node's bridge), as an administrator would run it.
	var pod struct{ Status struct{ PodIP string } }
	if err := cp.Get("/api/v1/namespaces/"+ns+"/pods/"+rec.Member, &pod); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "snapshot.db")
	start = time.Now()
	out, err := exec.Command(cp.Bin.Etcdctl, "--endpoints=http://"+pod.Status.PodIP+":2379", "snapshot", "save", file).CombinedOutput()
	ctlTime := time.Since(start)
	if err != nil {
		t.Fatalf("etcdctl snapshot save: %v\n%s", err, out)
	}
	fi, err := os.Stat(file)
	if err != nil {
		t.Fatal(err)
	}

	// Where the operator's time goes: etcd's JSON gateway alone (at the
	// Pod IP), and through the API server's Pod proxy (kubectl proxy in
	// front), each stream read and thrown away.
	direct := readStream(t, "http://"+pod.Status.PodIP+":2379/v3/maintenance/snapshot")
	proxied := readStream(t, cp.ProxyURL+"/api/v1/namespaces/"+ns+"/pods/"+rec.Member+":2379/proxy/v3/maintenance/snapshot")

	mib := func(n int64) float64 { return float64(n) / (1 << 20) }
	growth := peak - base
	t.Logf("backup of a %.0f MiB database (member %s)", mib(rec.Size), rec.Member)
	t.Logf("| | time | throughput |")
	t.Logf("|---|---|---|")
	t.Logf("| operator (gateway through the API server's Pod proxy, to versitygw, sha256 checked) | %s | %.0f MiB/s |", opTime, mib(rec.Size)/opTime.Seconds())
	t.Logf("| etcdctl snapshot save (gRPC to the Pod IP, to a local file) | %s | %.0f MiB/s |", ctlTime.Round(time.Millisecond), mib(fi.Size())/ctlTime.Seconds())
	t.Logf("| the JSON gateway's stream at the Pod IP, read and discarded | %s | %.0f MiB/s |", direct.Round(time.Millisecond), mib(rec.Size)/direct.Seconds())
	t.Logf("| the same through the API server's Pod proxy, read and discarded | %s | %.0f MiB/s |", proxied.Round(time.Millisecond), mib(rec.Size)/proxied.Seconds())
	t.Logf("operator/etcdctl time: %.2fx", opTime.Seconds()/ctlTime.Seconds())
	t.Logf("operator RSS: %.1f MiB before, %.1f MiB at most during the backup: +%.1f MiB (target under %d MiB)", mib(base), mib(peak), mib(growth), backupRSSTarget>>20)
	if rec.Size < 512<<20 {
		t.Errorf("the backup is %d bytes, want the 512 MiB written at least", rec.Size)
	}
	if growth >= backupRSSTarget {
		t.Errorf("the operator's RSS grew %.1f MiB while streaming, target under %d MiB", mib(growth), backupRSSTarget>>20)
	}
}

// readStream POSTs {} to url and reads the answer to its end.
func readStream(t *testing.T, url string) time.Duration {
	t.Helper()
	start := time.Now()
	resp, err := http.Post(url, "application/json", strings.NewReader("{}"))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if _, err := io.Copy(io.Discard, resp.Body); err != nil || resp.StatusCode != 200 {
		t.Fatalf("POST %s: %d %v", url, resp.StatusCode, err)
	}
	return time.Since(start)
}
