package troupe

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	pb "example.com/troupe-go/troupepb"
)

// The trailers the daemon adds when an actor raised (client.proto, Invoke).
const (
	TrailerErrorType   = "troupe-error-type"
	TrailerFailureKind = "troupe-failure-kind"
	TrailerDetails     = "troupe-error-details"
	TrailerAPIVersion  = "troupe-api-version"
)

// CallError is a failed call: the gRPC status plus, when the actor raised
// (UNKNOWN with troupe-error-type), the remote failure.
type CallError struct {
	Code       codes.Code
	Message    string // the status message: the remote message for an actor's error
	RemoteType string // empty unless the actor raised
	Kind       string // "raised", "no-such-method", "bad-arguments", or "" (not said)
	Details    string // the actor's stack trace, decoded; may be empty
	Trailer    metadata.MD
}

func (e *CallError) Error() string {
	if e.RemoteType != "" {
		return fmt.Sprintf("actor raised %s: %s (kind %s)", e.RemoteType, e.Message, orDash(e.Kind))
	}
	return fmt.Sprintf("%s: %s", e.Code, e.Message)
}

// Remote reports whether the actor itself failed (rather than the daemon).
func (e *CallError) Remote() bool { return e.RemoteType != "" }

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// NewCallError reads a failed call's status and trailers (collected with
// grpc.Trailer). It returns nil for a nil err.
func NewCallError(err error, trailer metadata.MD) *CallError {
	if err == nil {
		return nil
	}
	st, _ := status.FromError(err)
	e := &CallError{Code: st.Code(), Message: st.Message(), Trailer: trailer}
	if st.Code() == codes.Unknown {
		e.RemoteType = first(trailer, TrailerErrorType)
		e.Kind = first(trailer, TrailerFailureKind)
		// Percent-encoded "as grpc-message is"; grpc-go decodes grpc-message
		// itself but hands custom trailers over as sent.
		e.Details = PercentDecode(first(trailer, TrailerDetails))
	}
	return e
}

func first(md metadata.MD, key string) string {
	if v := md.Get(key); len(v) > 0 {
		return v[0]
	}
	return ""
}

// PercentDecode undoes gRPC's grpc-message encoding: bytes outside printable
// ASCII, and '%' itself, as %XX. A malformed escape is kept as it is rather
// than failing: the text is for people.
func PercentDecode(s string) string {
	if !strings.Contains(s, "%") {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '%' && i+2 < len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+3], 16, 8); err == nil {
				b.WriteByte(byte(v))
				i += 2
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// KindName is the trailer spelling of a FailureKind.
func KindName(k pb.FailureKind) string {
	switch k {
	case pb.FailureKind_FAILURE_KIND_RAISED:
		return "raised"
	case pb.FailureKind_FAILURE_KIND_NO_SUCH_METHOD:
		return "no-such-method"
	case pb.FailureKind_FAILURE_KIND_BAD_ARGUMENTS:
		return "bad-arguments"
	}
	return ""
}

// KindFromName is KindName's inverse (unspecified for "" or unknown text).
func KindFromName(s string) pb.FailureKind {
	for _, k := range []pb.FailureKind{pb.FailureKind_FAILURE_KIND_RAISED,
		pb.FailureKind_FAILURE_KIND_NO_SUCH_METHOD, pb.FailureKind_FAILURE_KIND_BAD_ARGUMENTS} {
		if KindName(k) == s {
			return k
		}
	}
	return pb.FailureKind_FAILURE_KIND_UNSPECIFIED
}

// CodeName is the status code as the SDKs name their error classes
// ("FailedPrecondition", "DeadlineExceeded"), used as the remote type when a
// nested call's failure is relayed.
func CodeName(c codes.Code) string {
	parts := strings.Split(strings.ToLower(c.String()), "_")
	if len(parts) == 1 {
		// grpc-go's String() is already CamelCase ("FailedPrecondition").
		return c.String()
	}
	for i, p := range parts {
		if p != "" {
			parts[i] = strings.ToUpper(p[:1]) + p[1:]
		}
	}
	return strings.Join(parts, "")
}

// IsCallError unwraps err to a *CallError.
func IsCallError(err error) (*CallError, bool) {
	var ce *CallError
	ok := errors.As(err, &ce)
	return ce, ok
}
