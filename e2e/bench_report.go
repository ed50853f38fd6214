package e2e

// What a benchmark run measured, the targets it checks, and the markdown
// tables cmd/bench prints: e2e/README.md's performance tables are pasted
// from that output, so the numbers there are the program's, not retyped.

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"time"
)

// BenchReport is what a run measured.
type BenchReport struct {
	Window time.Duration
	// The burst: Objects Pods and Services of Objects/7 clusters.
	Objects, Rounds int
	First           []string // which side went first, per round: operator, objects or requests (the loaders)
	// Medians over the rounds. Loader16 POSTs the operator's objects, 16
	// at a time; LoaderSame sends, per cluster and 16 clusters at a time,
	// what the operator sends: the EtcdCluster, two lists, the 7 objects
	// and a status write. Loader8 and Loader1 run once, after the rounds.
	Operator, Loader16, LoaderSame, Loader8, Loader1 time.Duration
	Ratios, SameRatios                               []float64 // per round, operator/loader
	BurstRequests                                    requestCount
	// One cluster: the operator against its 7 objects POSTed back to
	// back (SingleLoad) and against the same requests (SingleReads).
	Singles                         int
	Single, SingleLoad, SingleReads time.Duration
	// A restart over RestartClusters clusters that all exist, then a
	// window of steady state.
	RestartClusters int
	Restart         requestCount // in the first Window after the start
	RestartIdle     time.Duration
	Steady          requestCount // in the Window after that
	// Memory, after the restart and with 10 against RSSManyClusters.
	RSSIdle, RSS10, RSSMany int64 // bytes
	RSSIdleFile             int64 // of RSSIdle, the binary's pages (file-backed)
	RSSManyClusters         int
	BinarySize              int64
	// Day-2, on the real node (nil without it).
	Day2         []Day2Result
	SteadyHealth *requestCount // a healthy 3-member cluster, one Window
}

// Target is one checked line of the report.
type Target struct {
	What, Got, Want string
	Met             bool
}

// Targets are the report's promises, checked.
func (r *BenchReport) Targets() []Target {
	mib := func(b int64) float64 { return float64(b) / (1 << 20) }
	perMin := func(c requestCount) float64 { return float64(c.All) / r.Window.Minutes() }
	t := []Target{
		{"burst against the same requests at 16", fmt.Sprintf("%.2f×", float64(r.Operator)/float64(r.LoaderSame)), "≤ 1.25×", float64(r.Operator) <= 1.25*float64(r.LoaderSame)},
		{"burst against the objects only at 16", fmt.Sprintf("%.2f×", float64(r.Operator)/float64(r.Loader16)), "≤ 1.25×", float64(r.Operator) <= 1.25*float64(r.Loader16)},
		{"one cluster against the same requests", fmt.Sprintf("%.2f×", float64(r.Single)/float64(r.SingleReads)), "≤ 1.5×", float64(r.Single) <= 1.5*float64(r.SingleReads)},
		{"one cluster against the objects only", fmt.Sprintf("%.2f×", float64(r.Single)/float64(r.SingleLoad)), "≤ 1.25×", float64(r.Single) <= 1.25*float64(r.SingleLoad)},
		{"restart: writes", fmt.Sprint(r.Restart.Writes), "0", r.Restart.Writes == 0},
		{"restart: requests", fmt.Sprint(r.Restart.All), fmt.Sprintf("≤ %d (1 per cluster)", r.RestartClusters), r.Restart.All <= r.RestartClusters},
		{"steady state, unscheduled clusters", fmt.Sprintf("%.0f/min", perMin(r.Steady)), "0/min", r.Steady.All == 0},
		{"idle RSS", fmt.Sprintf("%.1f MiB", mib(r.RSSIdle)), "≤ 10 MiB", mib(r.RSSIdle) <= 10},
		{"RSS many against 10 clusters", fmt.Sprintf("%.2f×", float64(r.RSSMany)/float64(r.RSS10)), "≤ 1.20×", float64(r.RSSMany) <= 1.2*float64(r.RSS10)},
		{"static binary", fmt.Sprintf("%.1f MiB", mib(r.BinarySize)), "≤ 8 MiB", mib(r.BinarySize) <= 8},
	}
	if r.SteadyHealth != nil {
		t = append(t, Target{"steady state, healthy 3 members", fmt.Sprintf("%.0f/min", perMin(*r.SteadyHealth)), "0/min", r.SteadyHealth.All == 0})
	}
	return t
}

// Missed lists the targets not met.
func (r *BenchReport) Missed() []string {
	var out []string
	for _, t := range r.Targets() {
		if !t.Met {
			out = append(out, fmt.Sprintf("%s: %s, want %s", t.What, t.Got, t.Want))
		}
	}
	return out
}

// Table prints the report as markdown tables, as e2e/README.md shows them.
func (r *BenchReport) Table(w io.Writer) {
	ms := func(d time.Duration) string { return d.Round(time.Millisecond).String() }
	x := func(a, b time.Duration) string { return fmt.Sprintf("%.2f×", float64(a)/float64(b)) }
	mib := func(b int64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }
	each := func(rs []float64) string {
		var s []string
		for _, v := range rs {
			s = append(s, fmt.Sprintf("%.2f×", v))
		}
		return strings.Join(s, ", ")
	}
	met := map[string]string{}
	for _, t := range r.Targets() {
		met[t.What] = t.Want
		if !t.Met {
			met[t.What] += " **missed**"
		}
	}
	n := r.Objects / 7
	fmt.Fprintf(w, "| scenario | operator | anchor | ratio | target |\n|---|---|---|---|---|\n")
	fmt.Fprintf(w, "| %d clusters at once (%d objects), median of %d rounds, first: %s | %s | %s: the same requests, %d clusters at a time | %s (rounds: %s) | %s |\n",
		n, r.Objects, r.Rounds, strings.Join(r.First, ", "), ms(r.Operator), ms(r.LoaderSame), workers, x(r.Operator, r.LoaderSame), each(r.SameRatios), met["burst against the same requests at 16"])
	fmt.Fprintf(w, "| same | | %s: the objects only, %d at a time | %s (rounds: %s) | %s |\n", ms(r.Loader16), workers, x(r.Operator, r.Loader16), each(r.Ratios), met["burst against the objects only at 16"])
	fmt.Fprintf(w, "| same | | %s: the objects only, 8 at a time | %s | |\n", ms(r.Loader8), x(r.Operator, r.Loader8))
	fmt.Fprintf(w, "| same | | %s: the objects only, 1 at a time | %s | |\n", ms(r.Loader1), x(r.Operator, r.Loader1))
	fmt.Fprintf(w, "| the operator's requests for the burst (last round, until idle) | %s | %d POSTs | | |\n", r.BurstRequests, r.Objects)
	fmt.Fprintf(w, "| one cluster (7 objects), median of %d | %s | %s: the same requests | %s | %s |\n", r.Singles, ms(r.Single), ms(r.SingleReads), x(r.Single, r.SingleReads), met["one cluster against the same requests"])
	fmt.Fprintf(w, "| same | | %s: the objects only, back to back | %s | %s |\n", ms(r.SingleLoad), x(r.Single, r.SingleLoad), met["one cluster against the objects only"])
	fmt.Fprintf(w, "| restart over %d created clusters, %s window | %s, idle after %s | | | %s writes, %s requests |\n", r.RestartClusters, r.Window, r.Restart, ms(r.RestartIdle), met["restart: writes"], met["restart: requests"])
	fmt.Fprintf(w, "| steady state, %d clusters whose Pods stay unscheduled, next %s | %s | | | %s |\n", r.RestartClusters, r.Window, r.Steady, met["steady state, unscheduled clusters"])
	if r.SteadyHealth != nil {
		fmt.Fprintf(w, "| steady state, a healthy 3-member cluster on the node, %s | %s | | | %s |\n", r.Window, *r.SteadyHealth, met["steady state, healthy 3 members"])
	}
	fmt.Fprintf(w, "| idle RSS (after the restart) | %s (%s of it the binary's pages, %s anonymous) | | | %s |\n", mib(r.RSSIdle), mib(r.RSSIdleFile), mib(r.RSSIdle-r.RSSIdleFile), met["idle RSS"])
	fmt.Fprintf(w, "| RSS, %d against 10 watched clusters | %s | %s | %.2f× | %s |\n", r.RSSManyClusters, mib(r.RSSMany), mib(r.RSS10), float64(r.RSSMany)/float64(r.RSS10), met["RSS many against 10 clusters"])
	fmt.Fprintf(w, "| static binary (CGO_ENABLED=0, -s -w) | %s | | | %s |\n", mib(r.BinarySize), met["static binary"])
	if len(r.Day2) > 0 {
		fmt.Fprintf(w, "\n| day 2, on the real node | operator | anchor | gap | longest write gap |\n|---|---|---|---|---|\n")
		for _, d := range r.Day2 {
			gap := "—"
			if d.WriteGap > 0 {
				gap = ms(d.WriteGap)
			}
			fmt.Fprintf(w, "| %s | %s | %s (%s) | %s | %s |\n", d.What, ms(d.Operator), ms(d.Anchor), d.AnchorIs, ms(d.Operator-d.Anchor), gap)
		}
	}
}

func median(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}
