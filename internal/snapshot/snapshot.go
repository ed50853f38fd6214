// Package snapshot reads etcd's database as its v3 JSON gateway streams it,
// and checks the sha256 that etcd ends every snapshot with.
//
// POST /v3/maintenance/snapshot answers a stream of JSON messages, one per
// 32 KiB of the database, each with the bytes still to come and the chunk
// as base64:
//
//	{"result":{"remaining_bytes":"N","blob":"<base64>","version":"3.6.0"}}
//
// and, after the database, one more whose blob is the sha256 of everything
// before it. A Reader turns the stream back into bytes as they arrive (one
// message in memory at a time, whatever the database's size), hashes them,
// and hands out the trailing sha256 only once it matches and the stream has
// ended: a reader of the whole stream has got a verified snapshot, and a
// stream cut short, corrupted or ended by an error is an error, never a
// shorter file. The bytes it hands out, trailer included, are what
// `etcdutl snapshot restore` reads, and what a Check verifies again.
package snapshot

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"strconv"
)

const hashSize = sha256.Size

// Reader is the decoded, verified stream of one snapshot.
type Reader struct {
	body    io.ReadCloser
	dec     *json.Decoder
	total   int64 // the database's size, from the first message
	got     int64 // bytes of the database received so far
	msg     message
	buf     []byte // the last blob, decoded
	pending []byte // decoded bytes not yet handed out
	hash    hash.Hash
	trailer []byte // the sha256 that follows the database
	version string // etcd's storage version
	done    bool   // the trailer was handed out
	err     error  // sticky
}

// message is one message of the gateway's stream. The blob stays
// raw, to be decoded into a buffer used again for every message: a
// database streams through without 32 KiB of garbage per message.
type message struct {
	Result result `json:"result"`
	Error  *struct {
		Code     int    `json:"code"`
		GRPCCode int    `json:"grpc_code"`
		Message  string `json:"message"`
	} `json:"error"`
}

type result struct {
	RemainingBytes jsonInt         `json:"remaining_bytes"`
	Blob           json.RawMessage `json:"blob"`
	Version        string          `json:"version"`
	present        bool
}

// UnmarshalJSON notes that the message has a result.
func (r *result) UnmarshalJSON(b []byte) error {
	type fields result // without this method
	r.present = true
	return json.Unmarshal(b, (*fields)(r))
}

// jsonInt is a 64-bit integer as the gateway writes it: a JSON string
// ("123"), though a number is accepted too.
type jsonInt int64

func (n *jsonInt) UnmarshalJSON(b []byte) error {
	s := string(bytes.Trim(b, `"`))
	if s == "" || s == "null" {
		*n = 0
		return nil
	}
	v, err := strconv.ParseInt(s, 10, 64)
	*n = jsonInt(v)
	return err
}

// NewReader reads the first message of a gateway stream, which gives the
// database's size. Closing the Reader closes body.
func NewReader(body io.ReadCloser) (*Reader, error) {
	s := &Reader{body: body, dec: json.NewDecoder(body), total: -1, hash: sha256.New()}
	if err := s.next(); err != nil {
		if err == io.EOF {
			err = errors.New("empty snapshot stream")
		}
		return nil, err
	}
	return s, nil
}

// Size is the length of the whole stream: the database and its sha256.
func (s *Reader) Size() int64 { return s.total + hashSize }

func (s *Reader) Close() error { return s.body.Close() }

func (s *Reader) Read(p []byte) (int, error) {
	for len(s.pending) == 0 {
		if s.err != nil {
			return 0, s.err
		}
		s.err = s.next()
	}
	n := copy(p, s.pending)
	s.pending = s.pending[n:]
	return n, nil
}

// next decodes one message into pending.
func (s *Reader) next() error {
	m := &s.msg
	m.Result = result{Blob: m.Result.Blob[:0]}
	m.Error = nil
	if err := s.dec.Decode(m); err != nil {
		if err == io.EOF {
			return s.end()
		}
		return fmt.Errorf("snapshot stream cut after %d of %d bytes: %w", s.got, s.total, err)
	}
	switch {
	case m.Error != nil:
		return fmt.Errorf("etcd refused the snapshot: %s (code %d)", m.Error.Message, max(m.Error.Code, m.Error.GRPCCode))
	case !m.Result.present:
		return errors.New("snapshot stream: a message with neither result nor error")
	}
	blob, err := s.decodeBlob(m.Result.Blob)
	if err != nil {
		return err
	}
	if s.total < 0 {
		s.total = int64(len(blob)) + int64(m.Result.RemainingBytes)
		s.version = m.Result.Version
	}
	return s.take(blob)
}

// decodeBlob decodes a JSON string of base64 into s.buf.
func (s *Reader) decodeBlob(raw json.RawMessage) ([]byte, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	if len(raw) < 2 || raw[0] != '"' || raw[len(raw)-1] != '"' || bytes.IndexByte(raw, '\\') >= 0 {
		var b []byte // not a plain string: let encoding/json read it
		if err := json.Unmarshal(raw, &b); err != nil {
			return nil, fmt.Errorf("snapshot stream: blob: %w", err)
		}
		return b, nil
	}
	raw = raw[1 : len(raw)-1]
	if n := base64.StdEncoding.DecodedLen(len(raw)); cap(s.buf) < n {
		s.buf = make([]byte, n)
	}
	n, err := base64.StdEncoding.Decode(s.buf[:cap(s.buf)], raw)
	if err != nil {
		return nil, fmt.Errorf("snapshot stream: blob: %w", err)
	}
	return s.buf[:n], nil
}

// take splits a blob into database bytes, handed out at once, and
// trailer bytes, kept until the stream has ended.
func (s *Reader) take(blob []byte) error {
	data := blob[:min(int64(len(blob)), s.total-s.got)]
	s.hash.Write(data)
	s.got += int64(len(data))
	s.pending = data
	rest := blob[len(data):]
	if len(rest) == 0 {
		return nil
	}
	if len(s.trailer)+len(rest) > hashSize {
		return fmt.Errorf("snapshot stream: more than the %d bytes announced", s.total+hashSize)
	}
	s.trailer = append(s.trailer, rest...)
	if len(s.trailer) == hashSize && !bytes.Equal(s.trailer, s.hash.Sum(nil)) {
		return fmt.Errorf("snapshot stream: sha256 mismatch: the data hashes to %x, the stream says %x", s.hash.Sum(nil), s.trailer)
	}
	return nil
}

// end is the stream's end: the trailer, checked in take, goes out only
// now that nothing more came after it.
func (s *Reader) end() error {
	switch {
	case s.done:
		return io.EOF
	case len(s.trailer) < hashSize:
		return fmt.Errorf("snapshot stream cut after %d of %d bytes", s.got+int64(len(s.trailer)), s.total+hashSize)
	}
	s.pending, s.done = s.trailer, true
	return nil
}

// Check verifies a snapshot written to it: it ends with the sha256 of
// everything before it (etcdutl checks that too, unless told to skip it).
type Check struct {
	h    hash.Hash
	tail []byte // the last hashSize bytes seen
	n    int64
}

// NewCheck returns a Check with nothing written yet.
func NewCheck() *Check { return &Check{h: sha256.New()} }

func (s *Check) Write(p []byte) (int, error) {
	s.n += int64(len(p))
	s.tail = append(s.tail, p...)
	if extra := len(s.tail) - hashSize; extra > 0 {
		s.h.Write(s.tail[:extra])
		s.tail = append(s.tail[:0], s.tail[extra:]...)
	}
	return len(p), nil
}

// Whole reports whether what was written is a whole snapshot: its last 32
// bytes are the sha256 of the rest.
func (s *Check) Whole() bool {
	return len(s.tail) == hashSize && bytes.Equal(s.h.Sum(nil), s.tail)
}

// Len is how many bytes were written.
func (s *Check) Len() int64 { return s.n }
