// Unit tests of the argument mapping (docs/payloads.md), the state view and the decorators.
import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { ContentType, type StateChange } from "../src/gen/troupe/v1/common.js";
import { Actor, actor, App, InvalidArgument, kwargs, method, ReadOnlyStateError, State } from "../src/index.js";
import { specOf } from "../src/actor.js";
import { decodeCall, decodeResult, dumps, encodeCall, encodeResult, PayloadError } from "../src/payload.js";
import { commitState, endTurn, refuseState, rollbackState } from "../src/state.js";
import { currentTurn, TurnScope } from "../src/turn.js";
import { committed, turnOf } from "./state_turns.js";

const text = (b: Uint8Array | undefined): string => Buffer.from(b ?? new Uint8Array()).toString("utf8");

describe("call payloads", () => {
  test("encodeCall follows the table in docs/payloads.md", () => {
    assert.equal(text(encodeCall([], {}).data), '{"args":[],"kwargs":{}}');
    assert.equal(text(encodeCall([5], {}).data), '{"args":[5],"kwargs":{}}');
    assert.equal(text(encodeCall([], { by: 5 }).data), '{"args":[],"kwargs":{"by":5}}');
    const raw = encodeCall([new Uint8Array([0, 1])], {});
    assert.equal(raw.contentType, ContentType.CONTENT_TYPE_BYTES);
    assert.deepEqual([...raw.data], [0, 1]);
    // Bytes next to other arguments cannot travel raw; JSON cannot hold them either.
    assert.equal(encodeCall([new Uint8Array([1]), 2], {}).contentType, ContentType.CONTENT_TYPE_JSON);
  });

  test("JSON is compact and ASCII-safe like Python's json.dumps", () => {
    assert.equal(text(dumps({ a: [1, "zürich ✓", null], b: true })), '{"a":[1,"z\\u00fcrich \\u2713",null],"b":true}');
    assert.equal(text(dumps("😀")), '"\\ud83d\\ude00"');
    assert.equal(dumps(undefined), undefined);
  });

  test("decodeCall maps kwargs to one extra last argument", () => {
    const json = (s: string) => ({ data: Buffer.from(s), contentType: ContentType.CONTENT_TYPE_JSON });
    assert.deepEqual(decodeCall(json('{"args":[1,"two"],"kwargs":{}}')), [1, "two"]);
    assert.deepEqual(decodeCall(json('{"args":[1],"kwargs":{"by":5}}')), [1, { by: 5 }]);
    assert.deepEqual(decodeCall(json('{"kwargs":{"by":5}}')), [{ by: 5 }]);
    assert.deepEqual(decodeCall(json("{ }")), []);
    assert.deepEqual(decodeCall({ data: Buffer.alloc(0), contentType: ContentType.CONTENT_TYPE_UNSPECIFIED }), []);
    assert.deepEqual(decodeCall({ data: Buffer.from([7]), contentType: ContentType.CONTENT_TYPE_BYTES }), [new Uint8Array([7])]);
    assert.throws(() => decodeCall(json("[1]")), { name: "PayloadError", message: /must be an object .*, not an array$/ });
    // An object, so the message names the member that does not belong.
    assert.throws(() => decodeCall(json('{"args":[],"extra":1}')), { name: "PayloadError", message: /holds only "args" and "kwargs"; this one also has "extra"$/ });
    assert.throws(() => decodeCall(json('{"args":{}}')), PayloadError);
    assert.throws(() => decodeCall(json("{nope")), PayloadError);
  });

  test("results: undefined is null, bytes travel raw", () => {
    assert.equal(text(encodeResult(undefined).data), "null");
    assert.equal(encodeResult(new Uint8Array([1])).contentType, ContentType.CONTENT_TYPE_BYTES);
    assert.equal(decodeResult({ data: Buffer.alloc(0), contentType: ContentType.CONTENT_TYPE_JSON }), null);
    assert.deepEqual(decodeResult({ data: Buffer.from([1, 2]), contentType: ContentType.CONTENT_TYPE_BYTES }), new Uint8Array([1, 2]));
    assert.throws(() => encodeResult(10n), TypeError);
    assert.throws(() => encodeResult(() => 1), TypeError);
  });

  test("a Map or Set, at any depth, is refused with where it is and what to send instead", () => {
    // JSON.stringify writes both as {}: the caller or the store got an empty object.
    const refused = (where: RegExp, convert: RegExp) => (e: unknown) => {
      assert.ok(e instanceof TypeError, String(e));
      assert.match(e.message, where);
      assert.match(e.message, /which JSON has no form for \(it would arrive as \{\}\); convert it first, e\.g\. with /);
      assert.match(e.message, convert);
      return true;
    };
    const toEntries = /Object\.fromEntries\(map\), or \[\.\.\.map\] for its entries$/;
    assert.throws(() => encodeResult(new Map([["a", 1]])), refused(/^return value must be JSON-serialisable or a Uint8Array: it is a Map, /, toEntries));
    assert.throws(() => encodeResult({ tags: new Set(["x"]) }), refused(/: it holds a Set at \.tags, /, /\[\.\.\.set\]$/));
    assert.throws(() => encodeResult([{ a: { "b c": [0, new Map()] } }]), refused(/it holds a Map at \[0\]\.a\["b c"\]\[1\], /, toEntries));
    assert.throws(() => encodeResult(new Set(), "the event e/1 published"), refused(/^the event e\/1 published must be JSON-serialisable or a Uint8Array: it is a Set/, /\[\.\.\.set\]$/));
    assert.throws(() => encodeCall([1, { m: new Map() }], {}), refused(/^call arguments must be JSON-serialisable \(or one Uint8Array\): it holds a Map at \.args\[1\]\.m, /, toEntries));
    assert.throws(() => encodeCall([], { s: new Set() }), refused(/it holds a Set at \.kwargs\.s, /, /\[\.\.\.set\]$/));
    // Empty objects, and "{}" inside strings, are values like any other.
    assert.equal(text(encodeResult({ a: {}, b: "{}", c: [{}] }).data), '{"a":{},"b":"{}","c":[{}]}');
    // What a Map or Set becomes through its own toJSON travels.
    class Tags extends Set<string> {
      toJSON(): string[] {
        return [...this];
      }
    }
    assert.equal(text(encodeResult({ tags: new Tags(["x"]) }).data), '{"tags":["x"]}');
  });

  test("kwargs() as the last argument becomes keyword arguments", async () => {
    const { splitArgs } = await import("../src/payload.js");
    assert.deepEqual(splitArgs([1, kwargs({ by: 2 })]), [[1], { by: 2 }]);
    assert.deepEqual(splitArgs([{ by: 2 }]), [[{ by: 2 }], {}]);
  });
});

describe("State", () => {
  test("sends only changed keys, as UTF-8 JSON, and rolls back", () => {
    const state = new State<{ count: number; items: string[]; gone: boolean }>({
      count: Buffer.from("1"),
      items: Buffer.from('["a"]'),
      gone: Buffer.from("true"),
    });
    assert.deepEqual(
      committed(state, () => {
        assert.equal(state.get("count"), 1);
      }),
      [],
    ); // read but unchanged
    const changes = committed(state, () => {
      state.set("count", 2);
      state.get("items", []).push("b"); // in-place change of a value read in the turn
      state.delete("gone");
    });
    assert.deepEqual(
      changes.map((c) => [c.key, c.op?.$case, c.op?.$case === "set" ? text(c.op.value) : c.op?.value]),
      [
        ["count", "set", "2"],
        ["gone", "delete", true],
        ["items", "set", '["a","b"]'],
      ],
    );
    const [failed, inFailed] = turnOf(state, "fails");
    inFailed(() => {
      state.set("count", 99);
      state.get("items", []).push("c");
    });
    rollbackState(state, failed);
    endTurn(state, failed);
    assert.equal(state.get("count"), 2);
    assert.deepEqual(state.get("items"), ["a", "b"]);
    assert.deepEqual(state.toJSON(), { count: 2, items: ["a", "b"] });
    const [bad, inBad] = turnOf(state, "bad");
    inBad(() => {
      assert.equal(state.setDefault("gone", false), false);
      assert.throws(() => state.set("count", undefined as unknown as number), TypeError);
      state.set("count", 10n as unknown as number);
    });
    assert.throws(() => commitState(state, bad), TypeError);
    rollbackState(state, bad);
    endTurn(state, bad);
    assert.deepEqual(state.toJSON(), { count: 2, items: ["a", "b"] });
  });

  test("a Map or Set in state is refused: at the set, or nested, where the turn's changes are encoded", () => {
    const state = new State<{ m: unknown; o: unknown }>();
    const [turn, inTurn] = turnOf(state, "turn");
    inTurn(() => {
      assert.throws(
        () => state.set("m", new Map()),
        (e: unknown) => e instanceof TypeError && /^state\["m"\] must be JSON-serialisable: it is a Map, .* Object\.fromEntries\(map\)/.test(e.message),
      );
      assert.throws(() => state.set("m", new Set([1])), (e: unknown) => e instanceof TypeError && /^state\["m"\] must be JSON-serialisable: it is a Set, .*\[\.\.\.set\]$/.test(e.message));
      assert.equal(state.has("m"), false);
      state.set("o", { inner: new Set([1]) });
    });
    assert.throws(
      () => commitState(state, turn),
      (e: unknown) => e instanceof TypeError && /^state\["o"\] must be JSON-serialisable: it holds a Set at \.inner, /.test(e.message),
    );
    rollbackState(state, turn);
    endTurn(state, turn);
    assert.deepEqual(state.toJSON(), {});
  });

  test("stored bytes that are not JSON are reported", () => {
    assert.throws(() => new State({ bad: Buffer.from("{") }), /not JSON/);
  });
});

describe("State with turns side by side", () => {
  type S = { a: number; b: number; x: number; l: number[] };
  const changes = (list: StateChange[]): Record<string, string | null> =>
    Object.fromEntries(list.map((c) => [c.key, c.op?.$case === "set" ? text(c.op.value) : null]));

  test("a nested turn sends only its own changes", () => {
    const s = new State<S>({ a: Buffer.from("0"), b: Buffer.from("0") });
    const outer = new TurnScope(s, "t/1", "outer");
    const inner = new TurnScope(s, "t/1", "inner");
    currentTurn.run(outer, () => s.set("a", 1));
    // The nested turn reads the outer turn's unsent change and writes another key.
    currentTurn.run(inner, () => s.set("b", s.get("a", 0) + 1));
    assert.deepEqual(changes(commitState(s, inner)), { b: "2" });
    endTurn(s, inner);
    assert.deepEqual(changes(commitState(s, outer)), { a: "1" });
    endTurn(s, outer);
  });

  test("a failed nested turn keeps the outer turn's changes; a failed outer one returns to the daemon's", () => {
    const s = new State<S>({ a: Buffer.from("0") });
    const outer = new TurnScope(s, "t/1", "outer");
    const inner = new TurnScope(s, "t/1", "inner");
    currentTurn.run(outer, () => s.set("a", 1));
    currentTurn.run(inner, () => s.set("a", 5));
    rollbackState(s, inner);
    endTurn(s, inner);
    assert.equal(s.get("a"), 1);

    const again = new TurnScope(s, "t/1", "again");
    currentTurn.run(again, () => s.set("a", 7));
    assert.deepEqual(changes(commitState(s, again)), { a: "7" });
    endTurn(s, again);
    currentTurn.run(outer, () => s.set("x", 8));
    rollbackState(s, outer);
    endTurn(s, outer);
    assert.deepEqual(s.toJSON(), { a: 7 });
  });

  test("a read-only turn cannot write", () => {
    const s = new State<S>({ l: Buffer.from("[1]") });
    const scope = new TurnScope(s, "t/1", "peek", true);
    assert.throws(() => currentTurn.run(scope, () => s.set("l", [2])), (e: unknown) => e instanceof ReadOnlyStateError && /method "peek" of t\/1 is read-only/.test(e.message));
    assert.throws(() => {
      currentTurn.run(scope, () => {
        s.clear();
      });
    }, /tried to delete key "l"/);
    assert.deepEqual(refuseState(s, scope), []);
    // A change in place is undone and handed back for the daemon to refuse.
    currentTurn.run(scope, () => s.get("l", []).push(2));
    assert.deepEqual(changes(refuseState(s, scope)), { l: "[1,2]" });
    assert.deepEqual(s.toJSON(), { l: [1] });
  });
});

describe("decorators", () => {
  test("@actor records methods, options and renamed methods", () => {
    @actor("deco", { idleTimeout: "5m", state: "durable", maxMailbox: 10 })
    class Deco extends Actor {
      @method
      plain(): number {
        return 1;
      }

      @method({ name: "renamed", readonly: true })
      other(): number {
        return 2;
      }

      notExposed(): number {
        return 3;
      }
    }
    const app = new App({ actors: [Deco], address: "127.0.0.1:1" });
    assert.deepEqual(app.actorTypes, ["deco"]);
    const spec = specOf(Deco);
    assert.deepEqual([...spec.methods.entries()], [
      ["plain", "plain"],
      ["renamed", "other"],
    ]);
    assert.deepEqual(spec.proto.readonlyMethods, ["renamed"]);
    assert.equal(spec.proto.idleTimeoutMs, 300_000n);
    assert.equal(spec.proto.maxMailbox, 10);
    assert.equal(spec.proto.stateMode, 2);
    assert.equal(new Deco().id, "");
  });

  test("mistakes are reported when the class is declared", () => {
    assert.throws(() => actor("has space"), TypeError);
    assert.throws(() => actor("ok", { maxMailbox: 0 }), TypeError);
    assert.throws(() => actor("ok", { idleTimeout: "soon" }), InvalidArgument);
    assert.throws(() => {
      @actor("empty")
      class Empty extends Actor {}
      return Empty;
    }, /no @method/);
    assert.throws(() => new App({ actors: [] }), TypeError);
    class Undecorated extends Actor {}
    assert.throws(() => new App({ actors: [Undecorated] }), /decorate it with @actor/);
  });
});
