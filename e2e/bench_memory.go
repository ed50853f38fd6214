package e2e

// The benchmark's memory phase: the operator's resident set size once it
// is idle, watching 10 clusters and watching many. Their statuses need no
// pass and no objects of theirs exist, so this is the cost of a watched
// EtcdCluster alone; the cache of Pods and Services is in the restart's
// idle RSS (200 clusters, 1,400 objects).

import (
	"fmt"
	"os"
	"slices"
	"strings"
	"time"
)

// memory: the operator's RSS once idle, watching 10 clusters and watching
// RSSClusters.
func (b *bench) memory() error {
	r := b.r
	for _, m := range []struct {
		ns  string
		n   int
		rss *int64
	}{{"rss-few", 10, &r.RSS10}, {"rss-many", r.RSSManyClusters, &r.RSSMany}} {
		b.say("memory: %d watched clusters", m.n)
		if err := b.cp.CreateNamespace(m.ns); err != nil {
			return err
		}
		if err := parallel(workers, m.n, func(i int) error { return createCreatedCluster(b.cp, m.ns, fmt.Sprintf("m%05d", i)) }); err != nil {
			return err
		}
		op, err := b.startOperator(m.ns)
		if err != nil {
			return err
		}
		if err := waitIdle(b.proxy, 2*time.Minute); err != nil {
			return err
		}
		if *m.rss, err = rss(op.Pid()); err != nil {
			return err
		}
		if reqs, _ := b.proxy.snapshot(); countRequests(reqs).Writes > 0 {
			return fmt.Errorf("the operator wrote while watching %d created clusters: %v", m.n, reqs)
		}
	}
	b.stopOperator()
	return nil
}

// rss reads a process's resident set size from /proc.
func rss(pid int) (int64, error) {
	v, err := procStatus(pid, "VmRSS")
	return v[0], err
}

// procStatus reads size fields (kB) of /proc/PID/status, in bytes, from
// one read: e.g. VmRSS and its file-backed part RssFile (the binary's own
// pages) as they were at the same moment.
func procStatus(pid int, fields ...string) ([]int64, error) {
	v := make([]int64, len(fields))
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return v, err
	}
	found := 0
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) != 3 {
			continue
		}
		if i := slices.Index(fields, strings.TrimSuffix(f[0], ":")); i >= 0 {
			fmt.Sscan(f[1], &v[i])
			v[i] <<= 10
			found++
		}
	}
	if found != len(fields) {
		return v, fmt.Errorf("pid %d: not all of %v in /proc/PID/status", pid, fields)
	}
	return v, nil
}
