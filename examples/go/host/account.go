package main

import (
	"encoding/json"
	"math"

	pb "example.com/troupe-go/troupepb"
)

// The actor type and its state keys. Values are JSON, as docs/payloads.md
// says, so `troupe state get` and the Python/TypeScript clients read them.
const (
	accountType   = "account"
	keyBalance    = "balance"       // number: the account's money
	keyStatements = "statements"    // number: statement reminders handled
	keyDeactivate = "deactivations" // number: times the actor was deactivated
	reminderName  = "statement"
)

func accountSpec() *pb.ActorTypeSpec {
	return &pb.ActorTypeSpec{
		Name: accountType,
		// balance changes nothing, so concurrent reads of one account may
		// run together; the daemon refuses one that returns changes.
		ReadonlyMethods: []string{"balance"},
		// Everything else: the daemon's defaults (zero values).
	}
}

// method is one callable method of the type.
type method struct {
	params []param
	run    func(tc *turnCtx, a args) (any, *failure)
}

var methods = map[string]method{
	"deposit":            {[]param{{"amount", true}}, deposit},
	"withdraw":           {[]param{{"amount", true}}, withdraw},
	"balance":            {nil, balance},
	"transfer":           {[]param{{"to", true}, {"amount", true}}, transfer},
	"schedule_statement": {[]param{{"due", false}}, scheduleStatement},
}

func isReadonly(t *pb.Turn) bool {
	k := t.GetKind()
	return (k == pb.TurnKind_TURN_KIND_CALL || k == pb.TurnKind_TURN_KIND_UNSPECIFIED) && t.GetName() == "balance"
}

// runAccountTurn routes a turn to its method or scheduled-work handler.
// (stack() stops at this frame: what is below it is the host's plumbing.)
func runAccountTurn(tc *turnCtx) (any, *failure) {
	t := tc.turn
	switch t.GetKind() {
	case pb.TurnKind_TURN_KIND_CALL, pb.TurnKind_TURN_KIND_UNSPECIFIED:
		m, ok := methods[t.GetName()]
		if !ok {
			return nil, &failure{typ: "NoSuchMethod", kind: pb.FailureKind_FAILURE_KIND_NO_SUCH_METHOD,
				msg: "actor type " + accountType + " has no method " + quote(t.GetName()) + " (it has balance, deposit, schedule_statement, transfer, withdraw)"}
		}
		a, f := bind(t.GetName(), t.GetPayload(), m.params)
		if f != nil {
			return nil, f
		}
		return m.run(tc, a)
	case pb.TurnKind_TURN_KIND_REMINDER:
		// Scheduled turns answer JSON null (docs/scheduling.md, Handlers).
		return nil, onReminder(tc, t.GetName())
	default:
		return nil, raised("NotImplementedError", "account handles no %s turns (got %q)", kindName(t.GetKind()), t.GetName())
	}
}

// onActivate opens a new account at 0, so the balance key exists from the
// first activation (a state change carried by ActivateResult).
func onActivate(tc *turnCtx) *failure {
	if _, ok := tc.get(keyBalance); ok {
		return nil
	}
	return tc.set(keyBalance, 0)
}

// onDeactivate counts deactivations (carried by DeactivateResult).
func onDeactivate(tc *turnCtx, _ pb.Deactivate_Reason) *failure {
	n, f := tc.integer(keyDeactivate)
	if f != nil {
		return f
	}
	return tc.set(keyDeactivate, n+1)
}

func onReminder(tc *turnCtx, name string) *failure {
	if name != reminderName {
		return raised("NotImplementedError", "account has no reminder %q", name)
	}
	n, f := tc.integer(keyStatements)
	if f != nil {
		return f
	}
	return tc.set(keyStatements, n+1)
}

func deposit(tc *turnCtx, a args) (any, *failure) {
	amount, f := positiveAmount("deposit", a)
	if f != nil {
		return nil, f
	}
	bal, f := tc.integer(keyBalance)
	if f != nil {
		return nil, f
	}
	if bal > math.MaxInt64-amount || bal+amount >= maxExact {
		return nil, raised("Overflow", "a deposit of %d would take the balance past 2^53", amount)
	}
	return bal + amount, tc.set(keyBalance, bal+amount)
}

func withdraw(tc *turnCtx, a args) (any, *failure) {
	amount, f := positiveAmount("withdraw", a)
	if f != nil {
		return nil, f
	}
	return debit(tc, amount)
}

// debit takes amount from the balance, or raises InsufficientFunds.
func debit(tc *turnCtx, amount int64) (int64, *failure) {
	bal, f := tc.integer(keyBalance)
	if f != nil {
		return 0, f
	}
	if bal < amount {
		return 0, raised("InsufficientFunds", "account %s has %d, cannot withdraw %d", tc.inst.ref.GetId(), bal, amount)
	}
	return bal - amount, tc.set(keyBalance, bal-amount)
}

func balance(tc *turnCtx, _ args) (any, *failure) {
	return tc.integer(keyBalance)
}

// transfer withdraws here, then deposits on the other account from inside
// this turn. If the deposit fails, this turn fails too and its withdrawal is
// discarded with its other changes.
func transfer(tc *turnCtx, a args) (any, *failure) {
	to, f := a.str("transfer", "to", "")
	if f != nil {
		return nil, f
	}
	amount, f := positiveAmount("transfer", a)
	if f != nil {
		return nil, f
	}
	if to == tc.inst.ref.GetId() {
		// The deposit would call back into this actor on the same chain:
		// the daemon would refuse it as a deadlock (the type is not reentrant).
		return nil, raised("SameAccount", "cannot transfer from account %s to itself", to)
	}
	left, f := debit(tc, amount)
	if f != nil {
		return nil, f
	}
	var toBalance json.Number
	if f := tc.invoke(&pb.ActorRef{Type: accountType, Id: to}, "deposit", map[string]any{"amount": amount}, &toBalance); f != nil {
		return nil, f
	}
	return map[string]any{"balance": left, "to": to, "to_balance": toBalance}, nil
}

// scheduleStatement sets the reminder "statement" (due "1s" unless told);
// its firing increments the statements key.
func scheduleStatement(tc *turnCtx, a args) (any, *failure) {
	due, f := a.str("schedule_statement", "due", "1s")
	if f != nil {
		return nil, f
	}
	r, f := tc.setReminder(reminderName, due)
	if f != nil {
		return nil, f
	}
	return map[string]any{"reminder": r.GetName(), "next_due_unix_ms": r.GetNextDueUnixMs()}, nil
}

func positiveAmount(method string, a args) (int64, *failure) {
	n, f := a.integer(method, "amount")
	if f != nil {
		return 0, f
	}
	if n <= 0 {
		return 0, raised("InvalidAmount", "%s amount must be positive, got %d", method, n)
	}
	return n, nil
}

// integer reads a numeric state key (absent: 0).
func (tc *turnCtx) integer(key string) (int64, *failure) {
	raw, ok := tc.get(key)
	if !ok {
		return 0, nil
	}
	n, f := args{key: raw}.integer("state", key)
	if f != nil {
		return 0, raised("CorruptState", "state key %q of %s holds %.40s, not a whole number", key, refString(tc.inst.ref), raw)
	}
	return n, nil
}

func quote(s string) string { b, _ := json.Marshal(s); return string(b) }
