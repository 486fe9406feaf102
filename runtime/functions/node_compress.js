// node_compress: deflate (zlib format, level 6) of a text file with pako,
// Debian's node-pako (a JavaScript port of zlib), and the round trip back;
// the compress function of the suite in Node.js, checked by the same
// checker (its compressed bytes must equal zlib's own).
const fs = require('fs');
const crypto = require('crypto');
const pako = require('pako');

let CRC_TABLE = null;

// the CRC-32 table is built at init, before a snapshot
exports.init = () => {
  CRC_TABLE = new Int32Array(256);
  for (let n = 0; n < 256; n++) {
    let c = n;
    for (let k = 0; k < 8; k++) c = c & 1 ? 0xedb88320 ^ (c >>> 1) : c >>> 1;
    CRC_TABLE[n] = c;
  }
};

function crc32(data) {
  let c = -1;
  for (let i = 0; i < data.length; i++) c = CRC_TABLE[(c ^ data[i]) & 0xff] ^ (c >>> 8);
  return (c ^ -1) >>> 0;
}

exports.handler = (event) => {
  const data = fs.readFileSync(event.path);
  const level = event.level === undefined ? 6 : event.level;
  const packed = pako.deflate(data, { level });
  const back = pako.inflate(packed);
  return {
    input_bytes: data.length,
    input_crc32: crc32(data),
    compressed_bytes: packed.length,
    compressed_sha256: crypto.createHash('sha256').update(packed).digest('hex'),
    ratio: data.length / Math.max(1, packed.length),
    roundtrip_ok: Buffer.compare(Buffer.from(back.buffer, back.byteOffset, back.length), data) === 0,
  };
};
