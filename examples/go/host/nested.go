package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"example.com/troupe-go/internal/troupe"
	pb "example.com/troupe-go/troupepb"
)

// nestedTimeout bounds a call a turn makes; the turn's own deadline (the
// caller's) wins when it is sooner, so deadlines shrink along a chain.
const nestedTimeout = 5 * time.Second

// callContext is the context for a call made from the running turn: the
// turn's context (its deadline, CancelTurn) capped at nestedTimeout, with
// the turn's trace context as W3C headers (docs/observability.md: gRPC
// metadata traceparent/tracestate), a child span of the turn's.
func (tc *turnCtx) callContext() (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithTimeout(tc.ctx, nestedTimeout)
	if tp := tc.turn.GetTraceparent(); tp != "" {
		md := metadata.Pairs("traceparent", childSpan(tp))
		if ts := tc.turn.GetTracestate(); ts != "" {
			md.Append("tracestate", ts)
		}
		ctx = metadata.NewOutgoingContext(ctx, md)
	}
	return ctx, cancel
}

// invoke calls another actor from inside the turn with the turn's chain,
// unchanged, so the daemon can tell who waits on whom, and the turn's call
// metadata (calls.md: actors pass on what the next one needs). The JSON
// result is decoded into result.
func (tc *turnCtx) invoke(to *pb.ActorRef, methodName string, kwargs map[string]any, result any) *failure {
	payload, err := troupe.Kwargs(kwargs)
	if err != nil {
		return raised("EncodeError", "%v", err)
	}
	ctx, cancel := tc.callContext()
	defer cancel()
	var trailer metadata.MD
	resp, err := tc.stream.app.client.Invoke(ctx, &pb.InvokeRequest{
		Actor:    to,
		Method:   methodName,
		Payload:  payload,
		Metadata: tc.turn.GetMetadata(),
		Chain:    tc.turn.GetChain(),
	}, grpc.Trailer(&trailer))
	if err != nil {
		return relay("invoke "+refString(to)+"."+methodName, troupe.NewCallError(err, trailer))
	}
	if err := troupe.DecodeResultInto(resp.GetPayload(), result); err != nil {
		return raised("DecodeError", "result of %s.%s: %v", refString(to), methodName, err)
	}
	return nil
}

// setReminder sets a reminder of this actor through the client API (the
// request takes no chain: it is not a call and runs no turn).
func (tc *turnCtx) setReminder(name, due string) (*pb.Reminder, *failure) {
	ctx, cancel := tc.callContext()
	defer cancel()
	var trailer metadata.MD
	r, err := tc.stream.app.client.SetReminder(ctx, &pb.SetReminderRequest{
		Actor: tc.inst.ref,
		Name:  name,
		Due:   due,
	}, grpc.Trailer(&trailer))
	if err != nil {
		return nil, relay("set reminder "+name, troupe.NewCallError(err, trailer))
	}
	return r, nil
}

// relay turns a failed nested call into this turn's failure. An actor's
// error propagates with its original type, message and trace, this turn's
// frames first (docs/payloads.md); a daemon's error takes the status code
// as its type (FailedPrecondition, DeadlineExceeded...), as the SDKs name it.
// Either way this method ran, so the kind is RAISED.
func relay(what string, e *troupe.CallError) *failure {
	// stack(2): start at relay's caller, the method's frames.
	f := &failure{typ: troupe.CodeName(e.Code), msg: what + ": " + e.Message, details: stack(2), kind: pb.FailureKind_FAILURE_KIND_RAISED}
	if e.Remote() {
		f.typ, f.msg = e.RemoteType, e.Message
		if e.Details != "" {
			f.details = truncateDetails(f.details + "\n--- raised in " + what + " ---\n" + e.Details)
		}
	}
	return f
}

// truncateDetails keeps the end of a long trace: where it was raised.
func truncateDetails(s string) string {
	if len(s) <= maxDetails {
		return s
	}
	return "..." + s[len(s)-maxDetails+3:]
}

// childSpan keeps a W3C traceparent's trace id and flags and gives it a
// new span id: the handler's span, child of the daemon's turn span.
func childSpan(tp string) string {
	parts := strings.Split(tp, "-")
	if len(parts) < 4 || len(parts[2]) != 16 {
		return tp // not a version-00 header we understand: pass it on as is
	}
	var id [8]byte
	if _, err := rand.Read(id[:]); err != nil {
		return tp
	}
	parts[2] = hex.EncodeToString(id[:])
	return strings.Join(parts, "-")
}
