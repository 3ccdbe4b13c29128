// The peer side of `titan bench tokenizer`: times the npm `tiktoken` (WASM)
// encoder on the same text file and prints one JSON line.
//   node tokenizer_peer.cjs <encoding> <text file> <repeats>
'use strict';
const fs = require('fs');
const path = require('path');

const [encoding, file, repeatsText] = process.argv.slice(2);
const peers = process.env.TITAN_TOKENIZER_PEERS || path.join(__dirname, '..', 'tests', 'peers');
const { get_encoding } = require(path.join(peers, 'node_modules', 'tiktoken'));
const text = fs.readFileSync(file, 'utf8');
const enc = get_encoding(encoding);
const repeats = Math.max(1, parseInt(repeatsText || '5', 10));
let tokens = enc.encode_ordinary(text).length;  // warm-up (and the count to cross-check)
const seconds = [];
for (let i = 0; i < repeats; ++i) {
  const start = process.hrtime.bigint();
  tokens = enc.encode_ordinary(text).length;
  seconds.push(Number(process.hrtime.bigint() - start) / 1e9);
}
seconds.sort((a, b) => a - b);
enc.free();
console.log(JSON.stringify({ encoding, bytes: Buffer.byteLength(text), tokens, median_seconds: seconds[seconds.length >> 1] }));
