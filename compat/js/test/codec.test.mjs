// Tests of the packet codec against the golden vectors of PROTOCOL.md, the
// same file the Go codec (compat/wire) is tested against.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { decodePacket, encodePacket, WireError } from '../hotpath.js';

const golden = JSON.parse(readFileSync(new URL('../../wire/testdata/golden.json', import.meta.url), 'utf8'));

const fromHex = (hex) => Uint8Array.from(hex.match(/../g) ?? [], (h) => parseInt(h, 16));
const toHex = (b) => Buffer.from(b).toString('hex');
const text = (b) => new TextDecoder().decode(b);

// asGolden turns a decoded packet into the shape of golden.json: byte
// fields as text, batch items decoded, the compressed body as hex.
function asGolden(p) {
  const out = {};
  for (const [k, v] of Object.entries(p)) {
    if (k === 'items') out.items = v.map((item) => asGolden(decodePacket(item)));
    else if (k === 'body') out.body_hex = toHex(v);
    else out[k] = v instanceof Uint8Array ? text(v) : v;
  }
  return out;
}

// errorCodes maps golden.json's error classes to WireError codes.
const errorCodes = {
  empty: 'HP_ERR_MALFORMED_PACKET', // the close reason the Go ends give it too
  'unknown kind': 'HP_ERR_UNKNOWN_KIND',
  malformed: 'HP_ERR_MALFORMED_PACKET',
};

test('golden vectors are present', () => {
  assert.ok(golden.valid.length >= 20);
  assert.ok(golden.invalid.length >= 20);
});

for (const v of golden.valid) {
  test(`decode and encode golden: ${v.name}`, () => {
    const bytes = fromHex(v.hex);
    const p = decodePacket(bytes);
    assert.deepEqual(asGolden(p), v.packet);
    // Encoding the decoded packet gives back the same bytes...
    assert.equal(toHex(encodePacket(p)), v.hex);
    // ...and so does encoding the golden description itself.
    const described = { ...v.packet };
    if (described.items) described.items = described.items.map((item) => encodePacket(item));
    if (described.body_hex !== undefined) described.body = fromHex(described.body_hex);
    assert.equal(toHex(encodePacket(described)), v.hex);
  });
}

for (const v of golden.invalid) {
  test(`reject golden: ${v.name}`, () => {
    assert.throws(() => decodePacket(fromHex(v.hex)), (err) => {
      assert.ok(err instanceof WireError, `got ${err}`);
      assert.equal(err.code, errorCodes[v.error]);
      assert.equal(err.closeCode, 1008);
      return true;
    });
  });
}

// PROTOCOL.md §2: uvarint fields are 32-bit, at most 5 bytes, shortest form.
test('uvarint limits of 32-bit fields (§2)', () => {
  const result = (idHex) => () => decodePacket(fromHex('02' + idHex));
  assert.equal(decodePacket(fromHex('02ffffffff0f')).id, 0xffffffff);
  assert.throws(result('8080808010'), WireError); // 2^32
  assert.throws(result('ffffffff1f'), WireError); // over 32 bits
  assert.throws(result('8180808080'), WireError); // 5th byte continues
  assert.throws(result('ff00'), WireError); // not shortest
  assert.throws(result('80'), WireError); // truncated
  assert.equal(decodePacket(fromHex('028001')).id, 128);
  for (const id of [0, 1, 127, 128, 16383, 16384, 2 ** 21, 2 ** 28 - 1, 2 ** 28, 2 ** 32 - 1]) {
    const b = encodePacket({ kind: 'result', id });
    assert.equal(decodePacket(b).id, id);
  }
});

test('strings: UTF-8 checked, BOM kept, limits enforced (§2)', () => {
  const bom = encodePacket({ kind: 'event', event: '\ufeffx' });
  assert.equal(decodePacket(bom).event, '\ufeffx');
  // A surrogate half (ED A0 80) and an overlong slash (C0 AF) are not UTF-8.
  assert.throws(() => decodePacket(fromHex('0403eda080')), WireError);
  assert.throws(() => decodePacket(fromHex('0402c0af')), WireError);
  assert.equal(decodePacket(encodePacket({ kind: 'event', event: 'a'.repeat(255) })).event.length, 255);
  assert.throws(() => encodePacket({ kind: 'event', event: 'a'.repeat(256) }), RangeError);
  assert.throws(() => encodePacket({ kind: 'event', event: '' }), RangeError);
  const long = encodePacket({ kind: 'error', id: 1, code: 1, message: 'm'.repeat(4096) });
  assert.equal(decodePacket(long).message.length, 4096);
  assert.throws(() => encodePacket({ kind: 'error', id: 1, code: 1, message: 'm'.repeat(4097) }), RangeError);
  // Decoders reject one byte more too: an error message, a capability value.
  assert.throws(() => decodePacket(fromHex('030101' + '8120' + '6d'.repeat(4097))), WireError);
  assert.equal(decodePacket(fromHex('0d01016b' + '8020' + '76'.repeat(4096))).pairs[0][1].length, 4096);
  assert.throws(() => decodePacket(fromHex('0d01016b' + '8120' + '76'.repeat(4097))), WireError);
  // A capability key may be empty; a name may not.
  assert.deepEqual(decodePacket(encodePacket({ kind: 'capabilities', pairs: [['', '']] })).pairs, [['', '']]);
});

test('encoder refuses what a decoder would reject', () => {
  assert.throws(() => encodePacket({ kind: 'result', id: -1 }), RangeError);
  assert.throws(() => encodePacket({ kind: 'result', id: 2 ** 32 }), RangeError);
  assert.throws(() => encodePacket({ kind: 'result', id: 1.5 }), RangeError);
  assert.throws(() => encodePacket({ kind: 'emit', room: 'r', event: 'e', flags: 256 }), RangeError);
  assert.throws(() => encodePacket({ kind: 'answer', id: 1, status: 2 }), RangeError);
  assert.throws(() => encodePacket({ kind: 'batch', items: [] }), RangeError);
  assert.throws(() => encodePacket({ kind: 'batch', items: [{ kind: 'capabilities' }] }), RangeError);
  assert.throws(() => encodePacket({ kind: 'batch', items: [{ kind: 'ping' }, { kind: 'batch', items: [{ kind: 'ping' }] }] }), RangeError);
  assert.throws(() => encodePacket({ kind: 'nope' }), TypeError);
});

// A small deterministic generator (mulberry32), so a failure reproduces.
function rng(seed) {
  return () => {
    seed = (seed + 0x6d2b79f5) | 0;
    let t = Math.imul(seed ^ (seed >>> 15), 1 | seed);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

// Mutations of every golden vector: the decoder either throws a WireError
// or returns a packet that encodes back to exactly the input bytes (every
// field has one encoding: shortest uvarints, exact strings).
test('mutated vectors: WireError or an exact round trip', () => {
  const random = rng(1);
  const seeds = [...golden.valid, ...golden.invalid].map((v) => fromHex(v.hex));
  let accepted = 0;
  for (let i = 0; i < 20000; i++) {
    const b = [...seeds[Math.floor(random() * seeds.length)]];
    for (let m = 1 + Math.floor(random() * 3); m > 0; m--) {
      const at = Math.floor(random() * (b.length + 1));
      switch (Math.floor(random() * 4)) {
        case 0: if (b.length) b[at % b.length] = Math.floor(random() * 256); break;
        case 1: b.splice(at, 1); break;
        case 2: b.splice(at, 0, Math.floor(random() * 256)); break;
        case 3: b.length = at; break;
      }
    }
    const input = Uint8Array.from(b);
    let p;
    try {
      p = decodePacket(input);
    } catch (err) {
      assert.ok(err instanceof WireError, `${toHex(input)}: ${err}`);
      continue;
    }
    accepted++;
    assert.equal(toHex(encodePacket(p)), toHex(input));
  }
  assert.ok(accepted > 1000, `only ${accepted} mutations decoded`);
});
