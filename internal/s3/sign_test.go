package s3

import (
	"net/http"
	"testing"
	"time"
)

// AWS's published examples of SigV4 for S3 (the "Signature Calculations
// for the Authorization Header" page of the S3 API reference): the same
// credentials, date and requests give the same signatures.
func TestSignV4Vectors(t *testing.T) {
	const (
		access = "AKIAIOSFODNN7EXAMPLE"
		secret = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
	)
	date := time.Date(2013, 5, 24, 0, 0, 0, 0, time.UTC)
	tests := []struct {
		name, method, url string
		header            map[string]string
		payload           string
		signed, signature string
	}{
		{"GET object", "GET", "https://examplebucket.s3.amazonaws.com/test.txt",
			map[string]string{"Range": "bytes=0-9"}, emptyHash,
			"host;range;x-amz-content-sha256;x-amz-date", "f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41"},
		{"PUT object", "PUT", "https://examplebucket.s3.amazonaws.com/test$file.text",
			map[string]string{"Date": "Fri, 24 May 2013 00:00:00 GMT", "X-Amz-Storage-Class": "REDUCED_REDUNDANCY"},
			sha256Hex([]byte("Welcome to Amazon S3.")),
			"date;host;x-amz-content-sha256;x-amz-date;x-amz-storage-class", "98ad721746da40c64f1a55b78f14c238d841ea1380cd77a1b5971af0ece108bd"},
		{"GET bucket lifecycle", "GET", "https://examplebucket.s3.amazonaws.com/?lifecycle", nil, emptyHash,
			"host;x-amz-content-sha256;x-amz-date", "fea454ca298b7da1c68078a5d1bdbfbbe0d65c699e0f91ac7a200a0136783543"},
		{"list objects", "GET", "https://examplebucket.s3.amazonaws.com/?max-keys=2&prefix=J", nil, emptyHash,
			"host;x-amz-content-sha256;x-amz-date", "34b48302e7b5fa45bde8084f4b7868a86f0a534bc59db6670ed5711ef69dc6f7"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req, err := http.NewRequest(tt.method, tt.url, nil)
			if err != nil {
				t.Fatal(err)
			}
			for k, v := range tt.header {
				req.Header.Set(k, v)
			}
			Sign(req, access, secret, "us-east-1", tt.payload, date)
			want := "AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/aws4_request,SignedHeaders=" + tt.signed + ",Signature=" + tt.signature
			if got := req.Header.Get("Authorization"); got != want {
				t.Errorf("Authorization:\n got %s\nwant %s", got, want)
			}
		})
	}
}

func TestAWSEscape(t *testing.T) {
	tests := []struct {
		in   string
		path bool
		want string
	}{
		{"", true, "/"},
		{"/test$file.text", true, "/test%24file.text"},
		{"a b+c/d~e", true, "a%20b%2Bc/d~e"},
		{"a/b", false, "a%2Fb"},
		{"ü", false, "%C3%BC"},
	}
	for _, tt := range tests {
		if got := awsEscape(tt.in, tt.path); got != tt.want {
			t.Errorf("awsEscape(%q, %v) = %q, want %q", tt.in, tt.path, got, tt.want)
		}
	}
}
