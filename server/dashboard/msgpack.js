// A small msgpack reader for frame values, so the control plane never has to decode a payload.
// Plain values decode fully; extension types (tuples, arrays, pickled objects, ...) show as a
// placeholder naming their type code and size: a dashboard must never run what it was sent.
"use strict";

(function (global) {
  function decode(bytes) {
    const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
    let pos = 0;
    const text = new TextDecoder();

    function str(n) { const s = text.decode(bytes.subarray(pos, pos + n)); pos += n; return s; }
    function bin(n) { pos += n; return "<" + n + " bytes>"; }
    function ext(n) {
      const type = view.getInt8(pos); pos += 1 + n;
      return "<ext " + type + ", " + n + " bytes>";
    }
    function array(n) { const out = []; for (let i = 0; i < n; i++) out.push(read()); return out; }
    function map(n) {
      const out = {};
      for (let i = 0; i < n; i++) { const k = read(); out[String(k)] = read(); }
      return out;
    }
    function u(n) {
      let v;
      if (n === 1) v = view.getUint8(pos);
      else if (n === 2) v = view.getUint16(pos);
      else if (n === 4) v = view.getUint32(pos);
      else v = Number(view.getBigUint64(pos));
      pos += n; return v;
    }
    function i(n) {
      let v;
      if (n === 1) v = view.getInt8(pos);
      else if (n === 2) v = view.getInt16(pos);
      else if (n === 4) v = view.getInt32(pos);
      else v = Number(view.getBigInt64(pos));
      pos += n; return v;
    }
    function read() {
      const b = view.getUint8(pos++);
      if (b <= 0x7f) return b;
      if (b >= 0xe0) return b - 0x100;
      if ((b & 0xe0) === 0xa0) return str(b & 0x1f);
      if ((b & 0xf0) === 0x90) return array(b & 0x0f);
      if ((b & 0xf0) === 0x80) return map(b & 0x0f);
      switch (b) {
        case 0xc0: return null;
        case 0xc2: return false;
        case 0xc3: return true;
        case 0xc4: return bin(u(1));
        case 0xc5: return bin(u(2));
        case 0xc6: return bin(u(4));
        case 0xc7: return ext(u(1));
        case 0xc8: return ext(u(2));
        case 0xc9: return ext(u(4));
        case 0xca: { const v = view.getFloat32(pos); pos += 4; return v; }
        case 0xcb: { const v = view.getFloat64(pos); pos += 8; return v; }
        case 0xcc: return u(1);
        case 0xcd: return u(2);
        case 0xce: return u(4);
        case 0xcf: return u(8);
        case 0xd0: return i(1);
        case 0xd1: return i(2);
        case 0xd2: return i(4);
        case 0xd3: return i(8);
        case 0xd4: return ext(1);
        case 0xd5: return ext(2);
        case 0xd6: return ext(4);
        case 0xd7: return ext(8);
        case 0xd8: return ext(16);
        case 0xd9: return str(u(1));
        case 0xda: return str(u(2));
        case 0xdb: return str(u(4));
        case 0xdc: return array(u(2));
        case 0xdd: return array(u(4));
        case 0xde: return map(u(2));
        case 0xdf: return map(u(4));
        default: throw new Error("not msgpack (byte 0x" + b.toString(16) + ")");
      }
    }
    return read();
  }

  function fromBase64(b64) {
    const raw = atob(b64);
    const out = new Uint8Array(raw.length);
    for (let k = 0; k < raw.length; k++) out[k] = raw.charCodeAt(k);
    return out;
  }

  global.lakeshoreMsgpack = { decode: decode, fromBase64: fromBase64 };
})(window);
