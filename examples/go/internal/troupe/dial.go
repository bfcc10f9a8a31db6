// Package troupe holds what both the Go host and the Go client need on top of
// the generated gRPC code: dialling the daemon with a token, the JSON payload
// mapping of docs/payloads.md, and decoding an actor's error trailers.
package troupe

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// DefaultAddr is where `troupe serve` listens unless told otherwise.
const DefaultAddr = "127.0.0.1:7420"

// Addr is the daemon's address: TROUPE_ADDR, as the SDKs and the CLI read it.
func Addr() string {
	if a := strings.TrimSpace(os.Getenv("TROUPE_ADDR")); a != "" {
		return a
	}
	return DefaultAddr
}

// Token returns the first token of an environment variable. The daemon
// accepts a comma- or newline-separated list there (docs/security.md); a
// caller sends one of them, the first, as the CLI does.
func Token(env string) string {
	for _, t := range strings.FieldsFunc(os.Getenv(env), func(r rune) bool {
		return r == ',' || r == '\n' || r == '\r'
	}) {
		if t = strings.TrimSpace(t); t != "" {
			return t
		}
	}
	return ""
}

// target turns the address forms the CLI accepts (host:port, http://host:port,
// unix:/path) into a grpc-go target. "passthrough" skips DNS: the address is
// dialled as written.
func target(addr string) (string, error) {
	switch {
	case strings.HasPrefix(addr, "unix:"):
		return addr, nil
	case strings.HasPrefix(addr, "https://"):
		return "", fmt.Errorf("%s: this example speaks plaintext only (loopback or a Unix socket); TLS needs credentials.NewTLS", addr)
	case strings.HasPrefix(addr, "http://"):
		return "passthrough:///" + strings.TrimPrefix(addr, "http://"), nil
	}
	return "passthrough:///" + addr, nil
}

// bearer sends `authorization: Bearer <token>` on every RPC (docs/security.md).
// It allows plaintext: the example talks to a daemon on loopback.
type bearer string

func (b bearer) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + string(b)}, nil
}

func (bearer) RequireTransportSecurity() bool { return false }

// Dial opens a lazy connection to the daemon. maxRecv is the largest message
// this process accepts (gRPC's default is 4 MiB; the daemon may send more).
func Dial(addr, token string, maxRecv int) (*grpc.ClientConn, error) {
	t, err := target(addr)
	if err != nil {
		return nil, err
	}
	opts := []grpc.DialOption{
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(maxRecv)),
	}
	if token != "" {
		opts = append(opts, grpc.WithPerRPCCredentials(bearer(token)))
	}
	conn, err := grpc.NewClient(t, opts...)
	if err != nil {
		return nil, fmt.Errorf("dial %s: %w", addr, err)
	}
	return conn, nil
}

// NewKey makes a fresh idempotency key (a random UUID v4, as the SDKs make).
func NewKey() string {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		// crypto/rand does not fail on Linux; fall back to a fixed prefix
		// rather than crash, the key is then still unique per process run.
		return fmt.Sprintf("go-key-%d", os.Getpid())
	}
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	h := hex.EncodeToString(b[:])
	return h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}
