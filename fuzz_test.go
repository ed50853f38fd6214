package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"testing"
)

// FuzzWatchStream feeds arbitrary bytes to the watch-stream decoder: it must
// never panic, and whatever it hands to the control loop must be a complete
// event about a named object. Seeds are in testdata/fuzz/FuzzWatchStream.
func FuzzWatchStream(f *testing.F) {
	w := &watcher[*EtcdCluster]{decode: clusterRV, log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	f.Fuzz(func(t *testing.T, stream []byte) {
		events := make(chan event[*EtcdCluster])
		done := make(chan struct{})
		var got []event[*EtcdCluster]
		go func() {
			defer close(done)
			for ev := range events {
				got = append(got, ev)
			}
		}()
		rv, _, _ := w.decodeStream(context.Background(), bytes.NewReader(stream), "1", events)
		close(events)
		<-done
		if rv == "" {
			t.Errorf("resourceVersion lost: was 1, now empty")
		}
		for _, ev := range got {
			if ev.Object == nil || ev.Object.Metadata.Name == "" {
				t.Errorf("event without a named object: %+v", ev)
			}
			if ev.Type != "ADDED" && ev.Type != "MODIFIED" && ev.Type != "DELETED" {
				t.Errorf("event of type %q reached the control loop", ev.Type)
			}
		}
	})
}

// FuzzSpec checks parseSpec and the manifests built from what it accepts:
// no panic, sizes and versions within bounds, valid JSON, valid names.
// Seeds are in testdata/fuzz/FuzzSpec.
func FuzzSpec(f *testing.F) {
	f.Fuzz(func(t *testing.T, raw []byte, name string) {
		spec, err := parseSpec(raw)
		if err != nil {
			return
		}
		if spec.Size < minSize || spec.Size > maxSize || !imageTag.MatchString(spec.Version) {
			t.Fatalf("parseSpec(%q) accepted %+v", raw, spec)
		}
		if name == "" {
			name = "x"
		}
		p := newClusterPlan(&EtcdCluster{Metadata: objectMeta{Name: name, Namespace: "ns", UID: "u"}}, spec, "img")
		for _, n := range append([]string{p.ClientService}, p.Members...) {
			if len(n) > 63 || !dns1035.MatchString(n) {
				t.Fatalf("name %q (from %q) is not a DNS-1035 label", n, name)
			}
		}
		for _, b := range [][]byte{p.memberService(p.Members[0]), p.clientService(), p.memberPod(p.Members[0])} {
			if !json.Valid(b) {
				t.Fatalf("invalid JSON: %s", b)
			}
		}
	})
}
