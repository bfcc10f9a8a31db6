// Unit tests of what a failed turn tells the daemon (turn_failure.ts).
import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { FailureKind } from "../src/gen/troupe/v1/common.js";
import { failure } from "../src/turn_failure.js";

describe("a thrown value that is not an Error", () => {
  test("says what it holds: an object its JSON, not [object Object]", () => {
    assert.deepEqual(failure({ code: 42 }), { type: "Error", message: '{"code":42}', details: "", kind: FailureKind.FAILURE_KIND_RAISED });
    assert.equal(failure(["a", 1]).message, '["a",1]');
    assert.equal(failure("boom").message, "boom");
    assert.equal(failure(7).message, "7");
    assert.equal(failure(null).message, "null");
  });

  test("one JSON cannot carry reads as String makes it, and a long one is cut", () => {
    const cyclic: { self?: unknown } = {};
    cyclic.self = cyclic;
    assert.equal(failure(cyclic).message, "[object Object]");
    const long = failure({ text: "x".repeat(5000) }).message;
    assert.equal(long.length, 1025);
    assert.ok(long.endsWith("…"), long.slice(-10));
  });
});
