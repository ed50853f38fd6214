package s3test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/xml"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/etcd-operator/etcd-operator/internal/s3"
)

// The fake checks the payload hash as S3 does: one that is not the body's
// is refused with XAmzContentSHA256Mismatch, one that is missing with
// InvalidRequest, each in S3's XML error.
func TestChecksThePayloadHash(t *testing.T) {
	f := New(t, "bkt")
	for _, tt := range []struct {
		name   string
		change func(req *http.Request)
		status int
		code   string
	}{
		{"as signed", func(*http.Request) {}, http.StatusOK, ""},
		{"another body of the same length", func(req *http.Request) {
			req.Body = io.NopCloser(strings.NewReader("<CompleteMultipartUpload></CompleteMultipartUploaX>"))
		}, http.StatusBadRequest, "XAmzContentSHA256Mismatch"},
		{"no x-amz-content-sha256", func(req *http.Request) { req.Header.Del("X-Amz-Content-Sha256") }, http.StatusBadRequest, "InvalidRequest"},
		{"not a hash", func(req *http.Request) { req.Header.Set("X-Amz-Content-Sha256", "abc") }, http.StatusBadRequest, "InvalidArgument"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			f.Begin("bkt", "k.db")
			f.mu.Lock()
			id := "upload-" + strconv.Itoa(f.nextID)
			f.mu.Unlock()
			body := "<CompleteMultipartUpload></CompleteMultipartUpload>"
			req, err := http.NewRequestWithContext(context.Background(), http.MethodPost, f.URL+"/bkt/k.db?uploadId="+id, strings.NewReader(body))
			if err != nil {
				t.Fatal(err)
			}
			sum := sha256.Sum256([]byte(body))
			s3.Sign(req, f.Access, f.Secret, f.Region, hex.EncodeToString(sum[:]), time.Now())
			tt.change(req)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != tt.status {
				t.Fatalf("%d %s, want %d %s", resp.StatusCode, b, tt.status, tt.code)
			}
			var e struct{ Code string }
			if xml.Unmarshal(b, &e); tt.code != "" && e.Code != tt.code {
				t.Errorf("code %s (%s), want %s", e.Code, b, tt.code)
			}
		})
	}
}
