package e2e

// The benchmark's phases on the control plane alone: a burst of clusters
// at once and one cluster at a time, each timed for the operator and for
// the loaders on equal terms; then a restart over every cluster made, which
// should send no write, and a window of steady state, which should send
// nothing at all.

import (
	"fmt"
	"slices"
	"time"
)

// burst: Clusters clusters at once, in rounds. Each round runs the
// operator and the two 16-at-a-time loaders, each in a namespace of its
// own, each side first in turn. The loaders at 8 and 1 run once, after.
func (b *bench) burst() error {
	r := b.r
	var ops, l16s, sames []time.Duration
	for round := range r.Rounds {
		// Each side goes first in turn: the control plane holds more
		// objects for whoever comes later in a round.
		sides := []string{"operator", "objects", "requests"}
		for range round % len(sides) {
			sides = append(sides[1:], sides[0])
		}
		r.First = append(r.First, sides[0])
		for _, side := range sides {
			ns := fmt.Sprintf("%s%d", side, round)
			if err := b.cp.CreateNamespace(ns); err != nil {
				return err
			}
			var d time.Duration
			var err error
			switch side {
			case "operator":
				d, err = b.burstOperator(ns, round)
				ops = append(ops, d)
			case "objects":
				b.say("round %d/%d: loader, the operator's %d objects, %d at a time", round+1, r.Rounds, r.Objects, workers)
				d, err = b.loadBare(ns, workers)
				l16s = append(l16s, d)
			case "requests":
				b.say("round %d/%d: loader, the operator's requests for %d clusters, %d clusters at a time", round+1, r.Rounds, len(b.names), workers)
				d, err = b.loadSame(ns, workers)
				sames = append(sames, d)
			}
			if err != nil {
				return err
			}
			if side != "operator" {
				if err := b.settle(ns, len(b.names)*4); err != nil {
					return err
				}
			}
		}
		r.Ratios = append(r.Ratios, float64(ops[round])/float64(l16s[round]))
		r.SameRatios = append(r.SameRatios, float64(ops[round])/float64(sames[round]))
		b.say("round %d/%d: operator %v, objects loader %v (%.2f×), requests loader %v (%.2f×)", round+1, r.Rounds,
			ops[round].Round(time.Millisecond), l16s[round].Round(time.Millisecond), r.Ratios[round], sames[round].Round(time.Millisecond), r.SameRatios[round])
	}
	r.Operator, r.Loader16, r.LoaderSame = median(ops), median(l16s), median(sames)
	for _, p := range []struct {
		n int
		d *time.Duration
	}{{8, &r.Loader8}, {1, &r.Loader1}} {
		ns := fmt.Sprintf("loader-by-%d", p.n)
		if err := b.cp.CreateNamespace(ns); err != nil {
			return err
		}
		b.say("loader: the operator's %d objects, %d at a time", r.Objects, p.n)
		var err error
		if *p.d, err = b.loadBare(ns, p.n); err != nil {
			return err
		}
		if err := b.settle(ns, len(b.names)*4); err != nil {
			return err
		}
	}
	return nil
}

// burstOperator applies every cluster at once (16 POSTs at a time) to a
// freshly started operator, times its objects, then lets it settle and
// stops it.
func (b *bench) burstOperator(ns string, round int) (time.Duration, error) {
	if _, err := b.startOperator(ns); err != nil {
		return 0, err
	}
	if err := waitIdle(b.proxy, 30*time.Second); err != nil {
		return 0, err
	}
	b.proxy.reset()
	start := time.Now()
	b.say("round %d/%d: operator, %d clusters of 3 (%d objects) at once", round+1, b.r.Rounds, len(b.names), b.r.Objects)
	d, err := timeObjects(b.cp, ns, b.r.Objects, func() error {
		return parallel(workers, len(b.names), func(i int) error {
			_, err := b.cp.ApplyCluster(Cluster{Namespace: ns, Name: b.names[i], Size: 3, EmptyDir: true, Via: b.cp.ProxyURL})
			return err
		})
	})
	if err != nil {
		return 0, err
	}
	if err := b.settle(ns, len(b.names)*4); err != nil {
		return 0, err
	}
	reqs, last := b.proxy.snapshot()
	b.r.BurstRequests = countRequests(reqs)
	b.say("round %d/%d: operator: %s, idle %s after the first POST", round+1, b.r.Rounds, b.r.BurstRequests, last.Sub(start).Round(time.Millisecond))
	if b.objects == nil {
		if b.objects, err = objectsOf(b.cp, ns, ""); err != nil {
			return 0, err
		}
	}
	b.stopOperator()
	return d, nil
}

// single: one cluster at a time, Singles times, against its objects POSTed
// back to back and against the same requests as the operator's; which
// goes first alternates.
func (b *bench) single() error {
	r := b.r
	for _, ns := range []string{"single", "single-load", "single-reads"} {
		if err := b.cp.CreateNamespace(ns); err != nil {
			return err
		}
	}
	if _, err := b.startOperator("single"); err != nil {
		return err
	}
	if err := waitIdle(b.proxy, 30*time.Second); err != nil {
		return err
	}
	b.say("one cluster, %d times each", b.o.Singles)
	var ops, loads, reads []time.Duration
	for i := range b.o.Singles {
		name := fmt.Sprintf("single%02d", i)
		objs := objectsOfCluster(b.objects, b.names[0], name)
		runs := []func() error{
			func() error {
				d, err := timeObjects(b.cp, "single", 7, func() error {
					_, err := b.cp.ApplyCluster(Cluster{Namespace: "single", Name: name, Size: 3, EmptyDir: true, Via: b.cp.ProxyURL})
					return err
				})
				ops = append(ops, d)
				if err == nil {
					err = waitIdle(b.proxy, time.Minute)
				}
				return err
			},
			func() error {
				owners, err := ownersIn(b.cp, "single-load", []string{name})
				if err != nil {
					return err
				}
				reqs := retarget(objs, "single-load", owners)
				d, err := timeObjects(b.cp, "single-load", 7, func() error {
					for _, req := range reqs {
						if err := post(b.proxy.url, req); err != nil {
							return err
						}
					}
					return nil
				})
				loads = append(loads, d)
				return err
			},
			func() error {
				d, err := timeObjects(b.cp, "single-reads", 7, func() error {
					return sameRequests(b.cp, b.proxy.url, "single-reads", name, objs, false)
				})
				reads = append(reads, d)
				return err
			},
		}
		if i%2 == 1 {
			slices.Reverse(runs)
		}
		for _, run := range runs {
			if err := run(); err != nil {
				return err
			}
		}
	}
	r.Single, r.SingleLoad, r.SingleReads = median(ops), median(loads), median(reads)
	b.stopOperator()
	return nil
}

// restart starts the operator over every cluster of the burst's first
// round (all created, their Pods unscheduled), counts what it sends in one window, then
// what it sends in the next (steady state: nothing to do).
func (b *bench) restart() error {
	r := b.r
	ns := "operator0"
	if err := waitAllCreated(b.cp, ns, len(b.names)); err != nil {
		return err
	}
	r.RestartClusters = len(b.names)
	b.say("restart with %d clusters, then steady state: %s each", r.RestartClusters, r.Window)
	start := time.Now()
	op, err := b.startOperator(ns)
	if err != nil {
		return err
	}
	if err := waitIdle(b.proxy, r.Window); err != nil {
		return err
	}
	<-time.After(time.Until(start.Add(r.Window))) // the window is the measurement

	reqs, last := b.proxy.snapshot()
	r.Restart, r.RestartIdle = countRequests(reqs), last.Sub(start)
	v, err := procStatus(op.Pid(), "VmRSS", "RssFile")
	if err != nil {
		return err
	}
	r.RSSIdle, r.RSSIdleFile = v[0], v[1]
	b.proxy.reset()
	<-time.After(r.Window)
	reqs, _ = b.proxy.snapshot()
	r.Steady = countRequests(reqs)
	b.stopOperator()
	return nil
}

func waitAllCreated(cp *ControlPlane, ns string, n int) error {
	return Eventually(5*time.Minute, fmt.Sprintf("%d clusters Created in %s", n, ns), func() (bool, error) {
		var l struct {
			Items []struct {
				Status struct {
					Phase      string
					Conditions []struct{ Type, Reason string }
				}
			}
		}
		if err := cp.Get("/apis/coreos.com/v1/namespaces/"+ns+"/etcdclusters", &l); err != nil {
			return false, err
		}
		created := 0
		for _, c := range l.Items {
			for _, cond := range c.Status.Conditions {
				if cond.Type == "Progressing" && cond.Reason == "WaitingForMembers" || c.Status.Phase == "Running" {
					created++
					break
				}
			}
		}
		return created == n, nil
	})
}
