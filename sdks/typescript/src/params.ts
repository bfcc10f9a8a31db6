// How many arguments an actor method declares, read from its source once, when
// @actor collects it. A JS function silently drops arguments past its parameters,
// so a caller in another language (a Python client sending three positional
// arguments to a two-parameter method) would get a wrong answer instead of an
// error. `fn.length` cannot tell: it stops at the first default (`m(a, b = 1)` has
// length 1) and is 0 for a rest parameter.

/**
 * @internal The most arguments `fn` declares, or `undefined` when it takes any
 * number (a rest parameter) or its parameter list cannot be read (then nothing
 * is checked, as before).
 */
export function declaredParams(fn: (...args: never[]) => unknown): number | undefined {
  const source = Function.prototype.toString.call(fn);
  // An arrow function with one bare parameter: `x => ...`, `async x => ...`.
  if (/^(?:async\s+)?[\p{L}\p{Nl}$_][\p{L}\p{Nl}\p{Mn}\p{Mc}\p{Nd}\p{Pc}$]*\s*=>/u.test(source)) return 1;
  const open = source.indexOf("(");
  if (open < 0) return undefined;
  let depth = 0;
  let params = 0;
  let current = "";
  for (let i = open + 1; i < source.length; i++) {
    const c = source[i] ?? "";
    const next = source[i + 1] ?? "";
    if (c === "/" && next === "/") {
      i = source.indexOf("\n", i);
      if (i < 0) return undefined;
      continue;
    }
    if (c === "/" && next === "*") {
      i = source.indexOf("*/", i + 2) + 1;
      if (i <= 0) return undefined;
      continue;
    }
    if (c === '"' || c === "'" || c === "`") {
      // A string in a default value: skip it (escapes included); its content is not syntax.
      let j = i + 1;
      while (j < source.length && source[j] !== c) j += source[j] === "\\" ? 2 : 1;
      if (j >= source.length) return undefined;
      current += "s";
      i = j;
      continue;
    }
    if (c === "(" || c === "[" || c === "{") depth++;
    else if (c === ")" || c === "]" || c === "}") {
      if (depth === 0) {
        // The end of the parameter list.
        if (c !== ")") return undefined;
        return finish(current, params);
      }
      depth--;
    } else if (c === "," && depth === 0) {
      const done = finish(current, params);
      if (done === undefined) return undefined;
      params = done;
      current = "";
      continue;
    }
    current += c;
  }
  return undefined;
}

// Count one parameter (the text since the last top-level comma), if there is one:
// `m(a, b,)` has a trailing comma. A rest parameter takes any number.
function finish(param: string, counted: number): number | undefined {
  const text = param.trim();
  if (text.startsWith("...")) return undefined;
  return text === "" ? counted : counted + 1;
}
