package main

import (
	"bytes"
	"context"
	"log"
	"maps"
	"strings"
	"sync"
	"time"

	"google.golang.org/protobuf/proto"

	"example.com/troupe-go/internal/troupe"
	pb "example.com/troupe-go/troupepb"
)

// instance is the in-app copy of one active actor. state holds each key's
// bytes exactly as the daemon stores them (docs/payloads.md, "State": the
// JSON of the one value), so a turn's changes can be found by comparing bytes.
type instance struct {
	ref *pb.ActorRef
	// Writing turns hold it exclusively, read-only ones shared: the daemon
	// already never runs them side by side, this makes the rule local.
	mu    sync.RWMutex
	state map[string][]byte
}

type actorKey struct{ typ, id string }

func keyOf(ref *pb.ActorRef) actorKey { return actorKey{ref.GetType(), ref.GetId()} }

func refString(ref *pb.ActorRef) string { return ref.GetType() + "/" + ref.GetId() }

// actorTable is the stream's activations.
type actorTable struct {
	mu sync.Mutex
	m  map[actorKey]*instance
}

func (t *actorTable) init() { t.m = map[actorKey]*instance{} }

func (t *actorTable) get(ref *pb.ActorRef) *instance {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.m[keyOf(ref)]
}

func (t *actorTable) put(inst *instance) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.m[keyOf(inst.ref)] = inst
}

func (t *actorTable) remove(ref *pb.ActorRef) *instance {
	t.mu.Lock()
	defer t.mu.Unlock()
	inst := t.m[keyOf(ref)]
	delete(t.m, keyOf(ref))
	return inst
}

// leaseExpired: app.proto asks not to start work that arrives after the
// daemon's placement lease ended (0: no lease, a single daemon).
func leaseExpired(deadlineUnixMs uint64) bool {
	return deadlineUnixMs != 0 && uint64(time.Now().UnixMilli()) > deadlineUnixMs
}

// activate creates the instance from the stored state and runs the type's
// activation hook; its state changes travel in the ActivateResult.
func (s *stream) activate(a *pb.Activate) *pb.ActivateResult {
	res := &pb.ActivateResult{CallId: a.GetCallId()}
	if leaseExpired(a.GetLeaseDeadlineUnixMs()) {
		res.LeaseExpired = true // no instance, no hook
		return res
	}
	inst := &instance{ref: a.GetActor(), state: maps.Clone(a.GetState())}
	if inst.state == nil {
		inst.state = map[string][]byte{}
	}
	tc := newTurnCtx(s.ctx, s, inst, nil, false)
	if f := onActivate(tc); f != nil {
		res.Error = f.proto() // the pending calls fail with it
		return res
	}
	res.Changes = tc.commit()
	s.actors.put(inst)
	return res
}

// deactivate runs the hook and drops the instance; the hook's changes are
// the last word of this activation.
func (s *stream) deactivate(d *pb.Deactivate) *pb.DeactivateResult {
	res := &pb.DeactivateResult{CallId: d.GetCallId()}
	inst := s.actors.remove(d.GetActor())
	if inst == nil {
		return res // never activated here (or a lease-expired Activate)
	}
	// A turn that ran past its timeout may still hold the instance; its late
	// answer is ignored by the daemon, so do not wait for it.
	if !inst.mu.TryLock() {
		log.Printf("deactivating %s (%s) while a turn still runs: its changes are dropped", refString(inst.ref), d.GetReason())
		return res
	}
	defer inst.mu.Unlock()
	tc := newTurnCtx(s.ctx, s, inst, nil, false)
	if f := onDeactivate(tc, d.GetReason()); f != nil {
		log.Printf("deactivate hook of %s failed: %s: %s", refString(inst.ref), f.typ, f.msg)
		return res
	}
	res.Changes = tc.commit()
	return res
}

// startTurn runs one turn on its own goroutine and queues its answer.
func (s *stream) startTurn(t *pb.Turn) {
	s.turns.Add(1)
	go func() {
		defer s.turns.Done()
		res := s.runTurn(t)
		s.send(&pb.AppMessage{Kind: &pb.AppMessage_TurnResult{TurnResult: res}})
	}()
}

func (s *stream) runTurn(t *pb.Turn) *pb.TurnResult {
	res := &pb.TurnResult{CallId: t.GetCallId()}
	if leaseExpired(t.GetLeaseDeadlineUnixMs()) {
		res.LeaseExpired = true // not run: another daemon may own the actor now
		return res
	}
	inst := s.actors.get(t.GetActor())
	if inst == nil {
		res.Outcome = &pb.TurnResult_Error{Error: raised("NotActivated",
			"the daemon sent a turn for %s, which this host has not activated", refString(t.GetActor())).proto()}
		return res
	}
	// The turn's context ends at the caller's deadline, on CancelTurn, or
	// when the stream goes; calls the turn makes inherit it.
	var ctx context.Context
	var cancel context.CancelFunc
	if d := t.GetDeadlineUnixMs(); d != 0 {
		ctx, cancel = context.WithDeadline(s.ctx, time.UnixMilli(int64(d)))
	} else {
		ctx, cancel = context.WithCancel(s.ctx)
	}
	defer cancel()
	s.cancelMu.Lock()
	s.cancels[t.GetCallId()] = cancel
	s.cancelMu.Unlock()
	defer func() {
		s.cancelMu.Lock()
		delete(s.cancels, t.GetCallId())
		s.cancelMu.Unlock()
	}()

	readonly := isReadonly(t)
	if len(t.GetExpiredKeys()) > 0 {
		// The daemon deleted these keys (their ttl passed); drop them from
		// our copy before the turn reads it.
		inst.mu.Lock()
		for _, k := range t.GetExpiredKeys() {
			delete(inst.state, k)
		}
		inst.mu.Unlock()
	}
	if readonly {
		inst.mu.RLock()
		defer inst.mu.RUnlock()
	} else {
		inst.mu.Lock()
		defer inst.mu.Unlock()
	}
	tc := newTurnCtx(ctx, s, inst, t, readonly)
	logTurn(t)
	reply, f := runAccountTurn(tc)
	if f != nil {
		// A failed turn's changes are discarded: tc is dropped uncommitted.
		res.Outcome = &pb.TurnResult_Error{Error: f.proto()}
		if !callerWaits(t) {
			// Nobody waits for this answer: a best-effort tell or a
			// scheduled turn. Log it, as the SDKs do.
			log.Printf("WARNING %s %s of %s failed: %s: %s\n%s", kindName(t.GetKind()), t.GetName(), refString(t.GetActor()), f.typ, f.msg, f.details)
		}
		return res
	}
	data, err := troupe.EncodeJSON(reply)
	if err != nil {
		res.Outcome = &pb.TurnResult_Error{Error: raised("EncodeError", "result of %s: %v", t.GetName(), err).proto()}
		return res
	}
	res.Outcome = &pb.TurnResult_Reply{Reply: troupe.JSONPayload(data)}
	res.Changes = tc.commit()
	return res
}

// logTurn shows what each turn carried: its chain, metadata, trace and
// deadline (the demo reads these lines to see the nested call's context).
func logTurn(t *pb.Turn) {
	chain := make([]string, 0, len(t.GetChain().GetActors()))
	for _, a := range t.GetChain().GetActors() {
		chain = append(chain, refString(a))
	}
	deadline := "none"
	if d := t.GetDeadlineUnixMs(); d != 0 {
		deadline = time.Until(time.UnixMilli(int64(d))).Round(10 * time.Millisecond).String()
	}
	log.Printf("turn %s %s %s chain=[%s] metadata=%v traceparent=%q deadline_in=%s",
		refString(t.GetActor()), kindName(t.GetKind()), t.GetName(), strings.Join(chain, " > "),
		t.GetMetadata(), t.GetTraceparent(), deadline)
}

// callerWaits: only a call has a caller to hear its error, and a
// best-effort tell (Turn.unanswered) has none either.
func callerWaits(t *pb.Turn) bool {
	k := t.GetKind()
	return !t.GetUnanswered() && (k == pb.TurnKind_TURN_KIND_CALL || k == pb.TurnKind_TURN_KIND_UNSPECIFIED)
}

func kindName(k pb.TurnKind) string {
	if k == pb.TurnKind_TURN_KIND_UNSPECIFIED {
		return "call"
	}
	return strings.ToLower(strings.TrimPrefix(k.String(), "TURN_KIND_"))
}

// turnCtx is what actor code sees during a turn: the state through a
// write overlay (committed only when the turn succeeds), the turn itself
// and a context for the calls it makes.
type turnCtx struct {
	ctx      context.Context
	stream   *stream
	inst     *instance
	turn     *pb.Turn // nil in the activate/deactivate hooks
	readonly bool
	writes   map[string][]byte // nil value: deleted
}

func newTurnCtx(ctx context.Context, s *stream, inst *instance, t *pb.Turn, readonly bool) *turnCtx {
	return &turnCtx{ctx: ctx, stream: s, inst: inst, turn: t, readonly: readonly, writes: map[string][]byte{}}
}

// get returns a key's bytes as this turn sees them.
func (tc *turnCtx) get(key string) ([]byte, bool) {
	if v, ok := tc.writes[key]; ok {
		return v, v != nil
	}
	v, ok := tc.inst.state[key]
	return v, ok
}

// set stores v's JSON encoding under key.
func (tc *turnCtx) set(key string, v any) *failure {
	if tc.readonly {
		return raised("ReadOnlyStateError", "method %q of %s is read-only, so it cannot set key %q; the state is unchanged",
			tc.turn.GetName(), refString(tc.inst.ref), key)
	}
	data, err := troupe.EncodeJSON(v)
	if err != nil {
		return raised("EncodeError", "state key %q: %v", key, err)
	}
	tc.writes[key] = data
	return nil
}

// commit applies the overlay to the instance and returns the changes the
// daemon must apply: only keys whose bytes differ (docs/payloads.md).
func (tc *turnCtx) commit() []*pb.StateChange {
	var changes []*pb.StateChange
	for k, v := range tc.writes {
		old, had := tc.inst.state[k]
		switch {
		case v == nil && had:
			delete(tc.inst.state, k)
			changes = append(changes, &pb.StateChange{Key: k, Op: &pb.StateChange_Delete{Delete: true}})
		case v != nil && (!had || !bytes.Equal(old, v)):
			tc.inst.state[k] = v
			// ttl_ms left unset: the key keeps whatever expiry it has.
			changes = append(changes, &pb.StateChange{Key: k, Op: &pb.StateChange_Set{Set: v}})
		}
	}
	tc.writes = map[string][]byte{}
	return changes
}

func protoSize(m proto.Message) int { return proto.Size(m) }
