package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"testing"
)

// FuzzWatchStream feeds arbitrary bytes to the watch-stream decoder: it must
// never panic, and whatever it hands to the control loop must be a complete
// event about a named object. Then it puts N complete, valid events (and
// bookmarks) in front of the same bytes and reads the whole in chunks whose
// sizes the bytes pick: exactly those N events must come out first, in
// order, nothing lost or doubled (one decoder for the whole stream keeps
// what it read past an event), and then exactly what the bytes alone give.
// Seeds are in testdata/fuzz/FuzzWatchStream.
func FuzzWatchStream(f *testing.F) {
	w := &watcher[*EtcdCluster]{decode: clusterRV, log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	type result struct {
		events []event[*EtcdCluster]
		rv     string
		n      int
		err    error
	}
	decode := func(stream io.Reader, rv string) result {
		events := make(chan event[*EtcdCluster])
		done := make(chan struct{})
		var r result
		go func() {
			defer close(done)
			for ev := range events {
				r.events = append(r.events, ev)
			}
		}()
		r.rv, r.n, r.err = w.decodeStream(context.Background(), stream, rv, events)
		close(events)
		<-done
		return r
	}
	describe := func(evs []event[*EtcdCluster]) []string {
		var out []string
		for _, ev := range evs {
			out = append(out, ev.Type+" "+ev.Object.Metadata.Name+" "+ev.Object.Metadata.ResourceVersion)
		}
		return out
	}
	f.Add([]byte{})
	f.Add([]byte{1})
	f.Add([]byte("\x05\n"))
	f.Fuzz(func(t *testing.T, stream []byte) {
		alone := decode(bytes.NewReader(stream), "1")
		if alone.rv == "" {
			t.Errorf("resourceVersion lost: was 1, now empty")
		}
		if len(alone.events) > alone.n {
			t.Errorf("%d events out of %d read", len(alone.events), alone.n)
		}
		for _, ev := range alone.events {
			if ev.Object == nil || ev.Object.Metadata.Name == "" {
				t.Errorf("event without a named object: %+v", ev)
			}
			if ev.Type != "ADDED" && ev.Type != "MODIFIED" && ev.Type != "DELETED" {
				t.Errorf("event of type %q reached the control loop", ev.Type)
			}
		}

		k := 3
		if len(stream) > 0 {
			k = int(stream[0]) % 6
		}
		var prefix bytes.Buffer
		var want []string
		rv, bookmarks := "1", 0
		for i := range k {
			typ := []string{"ADDED", "MODIFIED", "DELETED"}[i%3]
			name, objRV := fmt.Sprintf("c%d", i), fmt.Sprint(1000+i)
			prefix.Write(mustJSON(map[string]any{"type": typ, "object": map[string]any{"apiVersion": apiVersion, "kind": kind,
				"metadata": map[string]any{"name": name, "namespace": "default", "resourceVersion": objRV}, "spec": map[string]any{"size": 3}}}))
			prefix.WriteByte('\n')
			want = append(want, typ+" "+name+" "+objRV)
			rv = objRV
			if i%2 == 1 || i == k-1 {
				rv = fmt.Sprint(2000 + i)
				prefix.Write(mustJSON(map[string]any{"type": "BOOKMARK", "object": map[string]any{"kind": kind, "apiVersion": apiVersion, "metadata": map[string]any{"resourceVersion": rv}}}))
				prefix.WriteByte('\n')
				bookmarks++
			}
		}
		tail := decode(bytes.NewReader(stream), rv)
		want = append(want, describe(tail.events)...)
		all := decode(&chunkReader{data: append(prefix.Bytes(), stream...), sizes: stream}, "1")
		if got := describe(all.events); !slices.Equal(got, want) {
			t.Errorf("%d events then the bytes, read in chunks: events\n%q\nwant\n%q", k, got, want)
		}
		if all.rv != tail.rv || all.n != k+bookmarks+tail.n || (all.err == nil) != (tail.err == nil) {
			t.Errorf("%d events then the bytes: rv %s, %d read, %v; want rv %s, %d read, %v", k, all.rv, all.n, all.err, tail.rv, k+bookmarks+tail.n, tail.err)
		}
	})
}

// chunkReader returns data in pieces of 1 to 16 bytes, sized by sizes in
// turn, as a network connection may.
type chunkReader struct {
	data, sizes []byte
	i           int
}

func (c *chunkReader) Read(p []byte) (int, error) {
	if len(c.data) == 0 {
		return 0, io.EOF
	}
	n := 7
	if len(c.sizes) > 0 {
		n = int(c.sizes[c.i%len(c.sizes)])%16 + 1
		c.i++
	}
	n = copy(p, c.data[:min(n, len(c.data))])
	c.data = c.data[n:]
	return n, nil
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
		p := newClusterPlan(objectMeta{Name: name, Namespace: "ns", UID: "u"}, "img:"+spec.Version)
		members := []string{memberName(p.Base, 0), memberName(p.Base, spec.Size-1)}
		for _, n := range append([]string{p.ClientService}, members...) {
			if len(n) > 63 || !dns1035.MatchString(n) {
				t.Fatalf("name %q (from %q) is not a DNS-1035 label", n, name)
			}
		}
		for _, b := range [][]byte{p.memberService(members[0]), p.clientService(), p.memberPod(members[0], initialCluster([]peer{{members[0], members[0]}}, false))} {
			if !json.Valid(b) {
				t.Fatalf("invalid JSON: %s", b)
			}
		}
	})
}
