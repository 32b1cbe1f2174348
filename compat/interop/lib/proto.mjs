// The few hotpath.v1 packets the Node tests use, written from
// compat/PROTOCOL.md by hand, so that neither compat's codecs nor
// hotpath.js check themselves.
export const Kind = { Call: 1, Result: 2, Error: 3, Join: 10, Emit: 12 };

function uvarint(v) {
  const out = [];
  while (v >= 0x80) { out.push((v & 0x7f) | 0x80); v = Math.floor(v / 128); }
  out.push(v);
  return Buffer.from(out);
}

function str(s) {
  const b = Buffer.from(s, 'utf8');
  return Buffer.concat([uvarint(b.length), b]);
}

const json = (v) => Buffer.from(JSON.stringify(v));

/** call encodes Call (§4.1): id, method, timeout (ms), JSON params. */
export const call = (id, method, params, timeout = 5000) =>
  Buffer.concat([Buffer.from([Kind.Call]), uvarint(id), str(method), uvarint(timeout), json(params ?? {})]);

/** join encodes Join (§4.5). */
export const join = (id, room) => Buffer.concat([Buffer.from([Kind.Join]), uvarint(id), str(room)]);

/** emit encodes a room Emit (§4.6) to every member. */
export const emit = (room, event, data) =>
  Buffer.concat([Buffer.from([Kind.Emit]), str(room), str(event), Buffer.from([0]), json(data)]);

function readUvarint(b, i) {
  let v = 0;
  for (let shift = 1; i < b.length; i++, shift *= 128) {
    v += (b[i] & 0x7f) * shift;
    if (b[i] < 0x80) return [v, i + 1];
  }
  throw new Error('truncated uvarint');
}

function readStr(b, i) {
  const [n, j] = readUvarint(b, i);
  if (j + n > b.length) throw new Error('truncated str');
  return [b.subarray(j, j + n).toString('utf8'), j + n];
}

/** decode reads a Result, Error or Emit packet. */
export function decode(buf) {
  const b = Buffer.from(buf);
  const kind = b[0];
  let i = 1;
  switch (kind) {
    case Kind.Result: {
      const [id, j] = readUvarint(b, i);
      return { kind, id, data: JSON.parse(b.subarray(j).toString() || 'null') };
    }
    case Kind.Error: {
      const [id, j] = readUvarint(b, i);
      const [code, k] = readUvarint(b, j);
      const [message] = readStr(b, k);
      return { kind, id, code, message };
    }
    case Kind.Emit: {
      const [room, j] = readStr(b, i);
      const [event, k] = readStr(b, j);
      return { kind, room, event, data: JSON.parse(b.subarray(k + 1).toString() || 'null') };
    }
    default:
      return { kind };
  }
}
