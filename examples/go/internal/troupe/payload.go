package troupe

import (
	"bytes"
	"encoding/json"
	"fmt"
	"unicode/utf8"

	pb "example.com/troupe-go/troupepb"
)

// EncodeJSON writes v as the SDKs do (docs/payloads.md): compact, no HTML
// escaping, and ASCII-safe (every non-ASCII character as \uXXXX, as Python's
// json.dumps does by default), so a value Python or TypeScript wrote reads
// back as the same bytes and is not re-sent as a change.
func EncodeJSON(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return asciiSafe(bytes.TrimRight(buf.Bytes(), "\n")), nil
}

// asciiSafe escapes non-ASCII runes. In JSON text they can only occur inside
// strings, where \uXXXX (a surrogate pair above U+FFFF) means the same.
func asciiSafe(b []byte) []byte {
	ascii := true
	for _, c := range b {
		if c >= utf8.RuneSelf {
			ascii = false
			break
		}
	}
	if ascii {
		return b
	}
	out := make([]byte, 0, len(b)+16)
	for len(b) > 0 {
		r, n := utf8.DecodeRune(b)
		b = b[n:]
		switch {
		case r < utf8.RuneSelf:
			out = append(out, byte(r))
		case r > 0xffff:
			r -= 0x10000
			out = fmt.Appendf(out, `\u%04x\u%04x`, 0xd800+(r>>10), 0xdc00+(r&0x3ff))
		default:
			out = fmt.Appendf(out, `\u%04x`, r)
		}
	}
	return out
}

// JSONPayload wraps JSON bytes as a Payload.
func JSONPayload(data []byte) *pb.Payload {
	return &pb.Payload{Data: data, ContentType: pb.ContentType_CONTENT_TYPE_JSON}
}

// Call builds a call payload {"args": [...], "kwargs": {...}}
// (docs/payloads.md, "A call"). Nil args/kwargs are sent as [] and {}, as the
// SDKs send them.
func Call(args []any, kwargs map[string]any) (*pb.Payload, error) {
	if args == nil {
		args = []any{}
	}
	if kwargs == nil {
		kwargs = map[string]any{}
	}
	data, err := EncodeJSON(struct {
		Args   []any          `json:"args"`
		Kwargs map[string]any `json:"kwargs"`
	}{args, kwargs})
	if err != nil {
		return nil, fmt.Errorf("encode call arguments: %w", err)
	}
	return JSONPayload(data), nil
}

// Kwargs is the common case: named arguments only.
func Kwargs(kv map[string]any) (*pb.Payload, error) { return Call(nil, kv) }

// DecodeResultInto decodes a result payload into out as encoding/json does:
// empty data is null, BYTES are decoded as a []byte would be.
func DecodeResultInto(p *pb.Payload, out any) error {
	data := p.GetData()
	if p.GetContentType() == pb.ContentType_CONTENT_TYPE_BYTES && len(data) > 0 {
		b, err := json.Marshal(data)
		if err != nil {
			return err
		}
		return json.Unmarshal(b, out)
	}
	if len(data) == 0 {
		data = []byte("null")
	}
	if err := json.Unmarshal(data, out); err != nil {
		return fmt.Errorf("decode JSON %q: %w", truncate(data, 80), err)
	}
	return nil
}

// DecodeJSON decodes one JSON value, numbers as json.Number.
func DecodeJSON(data []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, fmt.Errorf("decode JSON %q: %w", truncate(data, 80), err)
	}
	if dec.More() {
		return nil, fmt.Errorf("decode JSON %q: data after the value", truncate(data, 80))
	}
	return v, nil
}

func truncate(b []byte, n int) string {
	if len(b) <= n {
		return string(b)
	}
	return string(b[:n]) + "..."
}
