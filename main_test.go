// Tests of the command as main runs it: its flags, and a prompt, clean stop
// wherever the operator is when its context is cancelled.
package main

import (
	"bytes"
	"errors"
	"flag"
	"io"
	"strings"
	"testing"
)

func TestFlags(t *testing.T) {
	var out bytes.Buffer
	if _, err := parseFlags([]string{"-h"}, &out); !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("-h: err = %v", err)
	}
	for _, want := range []string{"-master", `(default "http://127.0.0.1:8001")`, "-namespace", `(default "default")`, "-workers", "(default 16)", "-qps", "-burst", "-request-timeout", "-watch-stall", "-image", "-page-size", "-log-level"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("-h output lacks %q:\n%s", want, out.String())
		}
	}
	for _, bad := range [][]string{{"-workers", "0"}, {"extra"}, {"-watch-stall", "1ms"}} {
		if _, err := parseFlags(bad, io.Discard); err == nil {
			t.Errorf("parseFlags(%q) accepted bad flags", bad)
		}
	}
}

// Cancelling the context stops the operator promptly, wherever it is.
func TestShutdown(t *testing.T) {
	for _, tc := range []struct {
		name  string
		block string // a request path suffix the fake never answers
		wait  func(f *fakeAPI) bool
	}{
		{name: "watching", wait: func(f *fakeAPI) bool { return len(f.streams) == 1 }},
		{name: "creating", block: "/pods", wait: func(f *fakeAPI) bool { return f.countExactLocked("POST", "/api/v1/namespaces/default/pods") == 1 }},
		// The Pod watcher lists too: wait for the (blocked) list of clusters.
		{name: "listing", block: "/etcdclusters", wait: func(f *fakeAPI) bool {
			return f.countExactLocked("GET", "/apis/coreos.com/v1/namespaces/default/etcdclusters") == 1
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFakeAPI(t)
			if tc.block != "" {
				f.fault = func(r request) (int, string, string) {
					if strings.HasSuffix(r.Path, tc.block) && (r.Method == "POST" || tc.name == "listing") {
						<-r.Ctx.Done()
					}
					return 0, "", ""
				}
			}
			f.putCluster("default", "example", size(1))
			op := startOperator(t, f)
			f.waitFor(tc.name, func() bool { return tc.wait(f) })
			op.stop() // fails the test if run does not return within 10s
			if !strings.Contains(op.logs.String(), "etcd-operator stopped") {
				t.Error("no log line says the operator stopped")
			}
		})
	}
}
