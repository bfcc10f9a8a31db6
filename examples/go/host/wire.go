package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"runtime"
	"strconv"
	"strings"

	pb "example.com/troupe-go/troupepb"
)

// failure is an actor's error on its way to the caller (ActorFailure).
type failure struct {
	typ, msg, details string
	kind              pb.FailureKind
}

func (f *failure) proto() *pb.ActorFailure {
	return &pb.ActorFailure{Type: f.typ, Message: f.msg, Details: f.details, Kind: f.kind}
}

// maxDetails: docs/payloads.md keeps an SDK's trace to about 3 KiB.
const maxDetails = 3 << 10

// raised is an error of the method itself (FAILURE_KIND_RAISED), with the
// Go stack where it was raised as details.
func raised(typ, format string, args ...any) *failure {
	return &failure{typ: typ, msg: fmt.Sprintf(format, args...), details: stack(2), kind: pb.FailureKind_FAILURE_KIND_RAISED}
}

// badArguments: the payload is no call or does not fit the method; nothing ran.
func badArguments(typ, format string, args ...any) *failure {
	return &failure{typ: typ, msg: fmt.Sprintf(format, args...), kind: pb.FailureKind_FAILURE_KIND_BAD_ARGUMENTS}
}

// stack formats the caller's goroutine stack as a Go panic does
// ("pkg.func()\n\tfile:line"), from the actor's frame down to the turn
// runner, leaving out this host's plumbing below it (as the Python SDK
// leaves out its own frames), at most maxDetails bytes.
func stack(skip int) string {
	pcs := make([]uintptr, 32)
	n := runtime.Callers(skip+1, pcs)
	frames := runtime.CallersFrames(pcs[:n])
	var b strings.Builder
	b.WriteString("goroutine [running]:\n")
	for {
		fr, more := frames.Next()
		line := fmt.Sprintf("%s(...)\n\t%s:%d\n", fr.Function, fr.File, fr.Line)
		if b.Len()+len(line) > maxDetails {
			break
		}
		b.WriteString(line)
		if !more || strings.HasSuffix(fr.Function, ".runAccountTurn") {
			break
		}
	}
	return strings.TrimRight(b.String(), "\n")
}

// param is one parameter of a method, in positional order.
type param struct {
	name     string
	required bool
}

// args are a call's arguments bound to its method's parameters by name.
type args map[string]json.RawMessage

// bind maps a call payload onto params as docs/payloads.md says: "args"
// positionally, then "kwargs" by name; empty data is no arguments. Anything
// that does not fit is the caller's mistake (FAILURE_KIND_BAD_ARGUMENTS).
func bind(method string, p *pb.Payload, params []param) (args, *failure) {
	out := args{}
	if len(p.GetData()) == 0 {
		return out, checkRequired(method, out, params)
	}
	if p.GetContentType() == pb.ContentType_CONTENT_TYPE_BYTES {
		// A raw call is one positional bytes argument; no method here takes one.
		return nil, badArguments("TypeError", "%s() takes no raw bytes argument (got %d bytes)", method, len(p.GetData()))
	}
	var call map[string]json.RawMessage
	if err := json.Unmarshal(p.GetData(), &call); err != nil || call == nil {
		return nil, badArguments("PayloadError", "call payload is not a JSON object {\"args\": [...], \"kwargs\": {...}}: %.80q", p.GetData())
	}
	var positional []json.RawMessage
	var named map[string]json.RawMessage
	for k, v := range call {
		var err error
		switch k {
		case "args":
			err = decodeOrNull(v, &positional)
		case "kwargs":
			err = decodeOrNull(v, &named)
		default:
			return nil, badArguments("PayloadError", "call payload has member %q; only \"args\" and \"kwargs\" are allowed", k)
		}
		if err != nil {
			return nil, badArguments("PayloadError", "call payload member %q: %v", k, err)
		}
	}
	if len(positional) > len(params) {
		return nil, badArguments("TypeError", "%s() takes %d arguments but %d were given", method, len(params), len(positional))
	}
	for i, v := range positional {
		out[params[i].name] = v
	}
	for k, v := range named {
		if !hasParam(params, k) {
			return nil, badArguments("TypeError", "%s() got an unexpected keyword argument %q", method, k)
		}
		if _, dup := out[k]; dup {
			return nil, badArguments("TypeError", "%s() got multiple values for argument %q", method, k)
		}
		out[k] = v
	}
	return out, checkRequired(method, out, params)
}

func decodeOrNull(v json.RawMessage, into any) error {
	if string(bytes.TrimSpace(v)) == "null" {
		return nil // treated as missing
	}
	return json.Unmarshal(v, into)
}

func hasParam(params []param, name string) bool {
	for _, p := range params {
		if p.name == name {
			return true
		}
	}
	return false
}

func checkRequired(method string, a args, params []param) *failure {
	for _, p := range params {
		if _, ok := a[p.name]; p.required && !ok {
			return badArguments("TypeError", "%s() missing required argument %q", method, p.name)
		}
	}
	return nil
}

// maxExact is the largest integer every SDK (JavaScript's doubles) reads exactly.
const maxExact = 1 << 53

// integer reads an argument as a whole number; 5.0 passes (Python may send
// it), 5.5, strings and the like do not fit (bad arguments).
func (a args) integer(method, name string) (int64, *failure) {
	var n json.Number
	dec := json.NewDecoder(bytes.NewReader(a[name]))
	dec.UseNumber()
	if err := dec.Decode(&n); err != nil {
		return 0, badArguments("TypeError", "%s() argument %q must be a number, got %.40s", method, name, a[name])
	}
	if i, err := strconv.ParseInt(n.String(), 10, 64); err == nil && i > -maxExact && i < maxExact {
		return i, nil
	}
	f, err := n.Float64()
	if err != nil || f != math.Trunc(f) || math.Abs(f) >= maxExact {
		return 0, badArguments("TypeError", "%s() argument %q must be a whole number below 2^53, got %s", method, name, n)
	}
	return int64(f), nil
}

// str reads an argument as a string; def when absent.
func (a args) str(method, name, def string) (string, *failure) {
	raw, ok := a[name]
	if !ok {
		return def, nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		return "", badArguments("TypeError", "%s() argument %q must be a string, got %.40s", method, name, raw)
	}
	return s, nil
}
