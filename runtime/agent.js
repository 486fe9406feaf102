'use strict';
// thaw in-sandbox agent for Node.js: serves one function over the inherited
// socket at fd 3, speaking the protocol of agent.py (docs/AGENT_PROTOCOL.md).
//
// Every message both ways is a 4-byte little-endian length N and N bytes of
// UTF-8 JSON (an object). Requests are read with blocking reads on fd 3, so
// between requests the main thread sits in read(2) as the Python agent does;
// a request is handled on the event loop (an async handler's promises and
// timers run) and answered before the next read.
//
// Usage (argv from thaw_runtime::RootInfo::agent_command):
//     node [flags] /opt/thaw/agent.js FUNCTION     a suite function, functions/FUNCTION.js
//     node [flags] /opt/thaw/agent.js --user       a deployed function: code at
//         /opt/thaw/user, entry points named by THAW_HANDLER (module.function),
//         THAW_INIT, THAW_BEFORE_SNAPSHOT and THAW_AFTER_RESTORE
//
// The handler has Lambda's shapes: `async (event, context) => value`,
// `(event, context, callback) => { callback(err, value) }`, or a plain
// function returning the value.

const fs = require('fs');
const path = require('path');
const crypto = require('crypto');
const { performance } = require('perf_hooks');
const { isUtf8 } = require('buffer');

const AGENT_VERSION = 1;
const CTRL_FD = 3;
const THAW_DIR = __dirname;
const FUNCTIONS_DIR = path.join(THAW_DIR, 'functions');
const INPUTS_DIR = path.join(THAW_DIR, 'inputs');
const USER_DIR = path.join(THAW_DIR, 'user');
// a deployed function's own Debian packages (mounted only when it has some)
const PACKAGES_DIRS = ['usr/share/nodejs', 'usr/lib/nodejs'].map((d) => path.join(THAW_DIR, 'packages', d));
const USER_FLAG = '--user';
const SIZES = ['I', 'II', 'III', 'IV'];

const MAX_REQUEST = Number(process.env.THAW_MAX_REQUEST || 16 << 20);
const MAX_OUTPUT = Number(process.env.THAW_MAX_OUTPUT || 1 << 20);
const DEFAULT_TIMEOUT_MS = Number(process.env.THAW_DEFAULT_TIMEOUT_MS || 60000);
const DISCARD_CHUNK = 1 << 20;
// rounds of the warm-up before a snapshot (see Agent.warmUp)
const WARM_ROUNDS = 8;

function log(msg) {
  try {
    fs.writeSync(2, 'agent: ' + msg + '\n');
  } catch (e) {
    // stderr gone: nothing to tell
  }
}

class BadRequest extends Error {}

// ---------------------------------------------------------------- framing

function readExact(n) {
  // exactly n bytes from fd 3; null on EOF before the first byte
  const buf = Buffer.allocUnsafe(n);
  let got = 0;
  while (got < n) {
    let k;
    try {
      k = fs.readSync(CTRL_FD, buf, got, Math.min(n - got, DISCARD_CHUNK), null);
    } catch (e) {
      if (e.code === 'EINTR' || e.code === 'EAGAIN') continue;
      throw e;
    }
    if (k === 0) {
      if (got === 0) return null;
      throw new EOFError('connection closed mid-message');
    }
    got += k;
  }
  return buf;
}

class EOFError extends Error {}

function discard(n) {
  let left = n;
  while (left > 0) {
    const chunk = readExact(Math.min(left, DISCARD_CHUNK));
    if (chunk === null) throw new EOFError('connection closed inside an oversized request');
    left -= chunk.length;
  }
}

// a reply as it goes on the wire: length, then the JSON
function encodeReply(reply) {
  const json = reply && typeof reply.raw === 'string' ? reply.raw : JSON.stringify(reply);
  const body = Buffer.from(json, 'utf8');
  const msg = Buffer.allocUnsafe(4 + body.length);
  msg.writeUInt32LE(body.length, 0);
  body.copy(msg, 4);
  return msg;
}

function sendMessage(msg) {
  let off = 0;
  while (off < msg.length) {
    try {
      off += fs.writeSync(CTRL_FD, msg, off, msg.length - off);
    } catch (e) {
      if (e.code === 'EINTR' || e.code === 'EAGAIN') continue;
      throw e;
    }
  }
}

function send(reply) {
  sendMessage(encodeReply(reply));
}

// [request or null, error message or null]; throws EOFError on close
function recv() {
  const head = readExact(4);
  if (head === null) throw new EOFError('closed');
  const n = head.readUInt32LE(0);
  if (n > MAX_REQUEST) {
    // the length is explicit, so the stream stays in sync: drop the body
    discard(n);
    return [null, `request of ${n} bytes exceeds the limit of ${MAX_REQUEST} bytes`];
  }
  const body = n ? readExact(n) : Buffer.alloc(0);
  if (body === null) throw new EOFError('closed');
  return decodeRequest(body);
}

// [request or null, error message or null] from a message's body. UTF-8
// is checked by Buffer's own validator rather than a fatal TextDecoder,
// which opens an ICU converter for every message (in a restored clone, the
// first one also faults ICU's code and data in).
function decodeRequest(body) {
  if (!isUtf8(body)) return [null, 'request is not UTF-8 JSON: invalid UTF-8'];
  let req;
  try {
    req = JSON.parse(body.toString('utf8'));
  } catch (e) {
    return [null, 'request is not UTF-8 JSON: ' + e.message];
  }
  if (req === null || typeof req !== 'object' || Array.isArray(req)) {
    return [null, 'request must be a JSON object'];
  }
  return [req, null];
}

function bad(message) {
  return { ok: false, error: 'bad_request', message };
}

// ---------------------------------------------------------------- errors

// The protocol's error (message "Type: text", traceback) with the fields
// of Lambda's shape (error_type, error_message, stack_trace).
function functionError(err, prefix = '') {
  let errorType;
  let errorMessage;
  let stack;
  if (err instanceof Error) {
    errorType = err.name || (err.constructor && err.constructor.name) || 'Error';
    errorMessage = String(err.message);
    stack = String(err.stack || `${errorType}: ${errorMessage}`);
  } else {
    errorType = err === null ? 'null' : typeof err;
    try {
      errorMessage = typeof err === 'string' ? err : JSON.stringify(err);
    } catch (e) {
      errorMessage = String(err);
    }
    if (errorMessage === undefined) errorMessage = String(err);
    stack = `${errorType}: ${errorMessage}`;
  }
  // the function's own frames, innermost first as V8 prints them; the
  // agent's left out
  const stackTrace = stack
    .split('\n')
    .slice(1)
    .map((l) => l.trim())
    .filter((l) => l.length > 0 && !l.includes(__filename));
  return {
    ok: false,
    error: 'function_error',
    message: `${prefix}${errorType}: ${errorMessage}`,
    traceback: stack,
    error_type: errorType,
    error_message: errorMessage,
    stack_trace: stackTrace,
  };
}

// ---------------------------------------------------------------- randomness

// Math.random is replaced before any function code runs by xoshiro128**
// (two 32-bit outputs per double, 53 random bits). Restored clones re-seed it
// from the worker's seed, as Python's `random.seed(seed)`: V8's own generator
// keeps its state in the heap and has no way to re-seed it.
const rngState = new Uint32Array(4);
// Request ids the worker does not give (Lambda's awsRequestId, a version 4
// UUID) come from a generator of their own, seeded with Math.random's:
// clones of one snapshot never repeat each other's, and drawing one costs
// no cipher (an id must be unique, not secret). Math.random's draws stay
// the function's alone.
const idState = new Uint32Array(4);

function rotl(x, k) {
  return (x << k) | (x >>> (32 - k));
}

function nextUint32(s = rngState) {
  const result = Math.imul(rotl(Math.imul(s[1], 5), 7), 9) >>> 0;
  const t = s[1] << 9;
  s[2] ^= s[0];
  s[3] ^= s[1];
  s[1] ^= s[2];
  s[0] ^= s[3];
  s[2] ^= t;
  s[3] = rotl(s[3], 11);
  return result;
}

// SHA-256 (FIPS 180-4) of a short message, in JavaScript: a restore re-seeds
// Math.random from the hash of its seed, and OpenSSL through the crypto
// module costs a restored clone ~0.2 ms there (its code and Node's binding
// faulted in, a hash object made and freed) where this costs microseconds.
const SHA256_K = Uint32Array.from([
  0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
  0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
  0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
  0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
  0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
  0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
  0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
  0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2,
]);

function sha256(msg) {
  // padded: the message, 0x80, zeros, the bit length (big-endian, 64 bits)
  const blocks = Math.ceil((msg.length + 9) / 64);
  const m = new Uint8Array(blocks * 64);
  m.set(msg);
  m[msg.length] = 0x80;
  const bits = msg.length * 8;
  for (let i = 0; i < 8; i++) m[m.length - 1 - i] = Math.floor(bits / 2 ** (8 * i)) & 0xff;
  const h = Uint32Array.of(0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19);
  const w = new Uint32Array(64);
  for (let b = 0; b < m.length; b += 64) {
    for (let i = 0; i < 16; i++) {
      const j = b + 4 * i;
      w[i] = (m[j] << 24) | (m[j + 1] << 16) | (m[j + 2] << 8) | m[j + 3];
    }
    for (let i = 16; i < 64; i++) {
      const x = w[i - 15];
      const y = w[i - 2];
      const s0 = ((x >>> 7) | (x << 25)) ^ ((x >>> 18) | (x << 14)) ^ (x >>> 3);
      const s1 = ((y >>> 17) | (y << 15)) ^ ((y >>> 19) | (y << 13)) ^ (y >>> 10);
      w[i] = w[i - 16] + s0 + w[i - 7] + s1;
    }
    let a = h[0], c1 = h[1], c2 = h[2], d = h[3], e = h[4], f = h[5], g = h[6], k = h[7];
    for (let i = 0; i < 64; i++) {
      const s1 = ((e >>> 6) | (e << 26)) ^ ((e >>> 11) | (e << 21)) ^ ((e >>> 25) | (e << 7));
      const t1 = (k + s1 + ((e & f) ^ (~e & g)) + SHA256_K[i] + w[i]) | 0;
      const s0 = ((a >>> 2) | (a << 30)) ^ ((a >>> 13) | (a << 19)) ^ ((a >>> 22) | (a << 10));
      const t2 = (s0 + ((a & c1) ^ (a & c2) ^ (c1 & c2))) | 0;
      k = g;
      g = f;
      f = e;
      e = (d + t1) | 0;
      d = c2;
      c2 = c1;
      c1 = a;
      a = (t1 + t2) | 0;
    }
    h[0] += a;
    h[1] += c1;
    h[2] += c2;
    h[3] += d;
    h[4] += e;
    h[5] += f;
    h[6] += g;
    h[7] += k;
  }
  const out = Buffer.allocUnsafe(32);
  for (let i = 0; i < 8; i++) out.writeUInt32BE(h[i], 4 * i);
  return out;
}

const MATH_RANDOM_DOMAIN = Buffer.from('thaw Math.random');

function seedDigest(seed) {
  return sha256(Buffer.concat([MATH_RANDOM_DOMAIN, seed]));
}

function seedMathRandom(seed) {
  // the 32 seed bytes hashed into two 128-bit states (never all zero)
  const h = seedDigest(seed);
  for (const [state, at] of [[rngState, 0], [idState, 16]]) {
    for (let i = 0; i < 4; i++) state[i] = h.readUInt32LE(at + 4 * i);
    if ((state[0] | state[1] | state[2] | state[3]) === 0) state[0] = 1;
  }
}

// The 32 seed bytes of a `restored` request.
function seedOf(req) {
  const seed = req.seed;
  if (typeof seed !== 'string' || seed.length !== 64 || !/^[0-9a-fA-F]{64}$/.test(seed)) {
    throw new BadRequest("restored needs 'seed': 64 hex characters");
  }
  return Buffer.from(seed, 'hex');
}

// 16 bytes as a version 4 UUID.
function uuidOf(b) {
  b[6] = (b[6] & 0x0f) | 0x40;
  b[8] = (b[8] & 0x3f) | 0x80;
  const h = b.toString('hex');
  return `${h.slice(0, 8)}-${h.slice(8, 12)}-${h.slice(12, 16)}-${h.slice(16, 20)}-${h.slice(20)}`;
}

function newRequestId() {
  const b = Buffer.allocUnsafe(16);
  for (let i = 0; i < 4; i++) b.writeUInt32LE(nextUint32(idState), 4 * i);
  return uuidOf(b);
}

function random() {
  const hi = nextUint32() >>> 5; // 27 bits
  const lo = nextUint32() >>> 6; // 26 bits
  return (hi * 67108864 + lo) / 9007199254740992;
}

function installMathRandom() {
  seedMathRandom(crypto.randomBytes(32));
  Object.defineProperty(Math, 'random', { value: random, writable: true, configurable: true });
}

// ---------------------------------------------------------------- the function

function isFile(p) {
  try {
    return fs.statSync(p).isFile();
  } catch (e) {
    return false;
  }
}

// `module.function`: the module part's dots are directories under the code
// directory (as Python's packages); the file is MODULE.js, .cjs or .mjs, or
// MODULE/index.js.
function splitEntry(name, what) {
  const i = name.lastIndexOf('.');
  if (i <= 0 || i === name.length - 1) {
    throw new BadRequest(`${what} ${JSON.stringify(name)} is not of the form module.function`);
  }
  return [name.slice(0, i), name.slice(i + 1)];
}

async function importModule(file) {
  if (file.endsWith('.mjs')) {
    return import(require('url').pathToFileURL(file).href);
  }
  try {
    return require(file);
  } catch (e) {
    if (e && e.code === 'ERR_REQUIRE_ESM') {
      return import(require('url').pathToFileURL(file).href);
    }
    throw e;
  }
}

async function loadUserModule(moduleName) {
  const base = path.join(USER_DIR, ...moduleName.split('.'));
  for (const ext of ['.js', '.cjs', '.mjs']) {
    if (isFile(base + ext)) return importModule(base + ext);
  }
  if (isFile(path.join(base, 'index.js'))) return importModule(path.join(base, 'index.js'));
  throw new BadRequest(`module ${JSON.stringify(moduleName)} not found (no ${moduleName.split('.').join('/')}.js, .cjs or .mjs)`);
}

async function resolveEntry(name, what) {
  const [moduleName, attr] = splitEntry(name, what);
  const mod = await loadUserModule(moduleName);
  const fn = mod && mod[attr];
  if (typeof fn !== 'function') {
    throw new BadRequest(`${what} ${JSON.stringify(name)}: module ${JSON.stringify(moduleName)} has no function ${JSON.stringify(attr)}`);
  }
  return [fn, mod];
}

function addPackagePaths() {
  const dirs = PACKAGES_DIRS.filter((d) => fs.existsSync(d));
  if (dirs.length === 0) return;
  // after the root's own: the packages never replace what it has
  const Module = require('module');
  const old = process.env.NODE_PATH ? process.env.NODE_PATH.split(path.delimiter) : [];
  process.env.NODE_PATH = old.concat(dirs).join(path.delimiter);
  Module._initPaths();
}

function readInput(fn, size) {
  const p = path.join(INPUTS_DIR, fn, size + '.json');
  let text;
  try {
    text = fs.readFileSync(p, 'utf8');
  } catch (e) {
    if (e.code === 'ENOENT') throw new BadRequest(`function ${JSON.stringify(fn)} has no input of size ${size}`);
    throw e;
  }
  return JSON.parse(text);
}

function rssKb() {
  // no /proc in the sandbox: the peak resident set from getrusage (KiB)
  return process.resourceUsage().maxRSS;
}

function sinceMs(t0) {
  return performance.now() - t0;
}

// Lambda's context object, one per invocation.
function makeContext(agent, requestId, deadline, settle) {
  const name = process.env.THAW_FUNCTION_NAME || agent.functionName;
  const context = {
    awsRequestId: requestId,
    functionName: name,
    functionVersion: process.env.THAW_FUNCTION_VERSION || '$LATEST',
    invokedFunctionArn: `arn:thaw:function:${name}`,
    memoryLimitInMB: process.env.THAW_MEMORY_MB || '',
    logGroupName: `/thaw/${name}`,
    logStreamName: process.env.THAW_INSTANCE_ID || 'fresh',
    callbackWaitsForEmptyEventLoop: true,
    getRemainingTimeInMillis() {
      return deadline === null ? 2147483647 : Math.max(0, Math.round(deadline - performance.now()));
    },
    // the legacy ways to finish
    done(err, value) {
      settle(err, value);
    },
    succeed(value) {
      settle(null, value);
    },
    fail(err) {
      settle(err === undefined || err === null ? new Error('handled') : err);
    },
  };
  return context;
}

function requestId(req) {
  if (typeof req.request_id === 'string' && req.request_id.length <= 128) return req.request_id;
  return newRequestId();
}

class TimeoutSignal {}

class Agent {
  constructor(fn) {
    this.functionName = fn;
    this.handler = null;
    this.module = null;
    this.afterRestoreHook = null;
    this.beforeSnapshotHook = null;
    this.beforeSnapshotRan = false;
    this.invocations = 0;
    this.loadInfo = null;
    // the invocation in flight: rejects it when the function's own
    // promises fail outside the handler's chain (unhandled rejections)
    this.failCurrent = null;
    this.trampolineLeft = false;
  }

  async load() {
    if (this.handler !== null) return Object.assign({}, this.loadInfo, { already_loaded: true });
    if (this.functionName === USER_FLAG) return this.loadUser();
    const fn = this.functionName;
    if (!fn || fn.startsWith('.') || fn.includes('/')) throw new BadRequest(`bad function name ${JSON.stringify(fn)}`);
    const file = path.join(FUNCTIONS_DIR, fn + '.js');
    if (!isFile(file)) throw new BadRequest(`unknown function ${JSON.stringify(fn)}`);
    const t0 = performance.now();
    const mod = await importModule(file);
    const t1 = performance.now();
    if (typeof mod.init === 'function') await mod.init();
    const t2 = performance.now();
    if (typeof mod.handler !== 'function') throw new BadRequest(`function ${JSON.stringify(fn)} has no handler`);
    this.module = mod;
    this.handler = mod.handler;
    return this.finishLoad(t0, t1, t2);
  }

  async loadUser() {
    addPackagePaths();
    const t0 = performance.now();
    const [handler, mod] = await resolveEntry(process.env.THAW_HANDLER || '', 'handler');
    const t1 = performance.now();
    if (process.env.THAW_INIT) {
      const [init] = await resolveEntry(process.env.THAW_INIT, 'init');
      await init();
    }
    const t2 = performance.now();
    if (process.env.THAW_AFTER_RESTORE) {
      [this.afterRestoreHook] = await resolveEntry(process.env.THAW_AFTER_RESTORE, 'after_restore');
    }
    if (process.env.THAW_BEFORE_SNAPSHOT) {
      [this.beforeSnapshotHook] = await resolveEntry(process.env.THAW_BEFORE_SNAPSHOT, 'before_snapshot');
    }
    this.module = mod;
    this.handler = handler;
    return this.finishLoad(t0, t1, t2);
  }

  finishLoad(t0, t1, t2) {
    this.loadInfo = {
      ok: true,
      op: 'load',
      function: this.functionName,
      import_ms: t1 - t0,
      init_ms: t2 - t1,
      rss_kb: rssKb(),
    };
    return this.loadInfo;
  }

  // `own`: a handler of the agent's own (the warm-up's), not counted
  async invoke(req, own = null) {
    const [event, timeoutMs] = this.invocationOf(req);
    if (own === null && this.handler === null) await this.load();
    if (own === null) this.invocations += 1;
    return this.run(own === null ? this.handler : own, event, timeoutMs, requestId(req));
  }

  // An invoke request's event and timeout.
  invocationOf(req) {
    if ('input' in req && 'size' in req) throw new BadRequest("give either 'size' or 'input', not both");
    let event;
    if ('input' in req) {
      event = req.input;
    } else if ('size' in req) {
      if (!SIZES.includes(req.size)) {
        throw new BadRequest(`unknown input size ${JSON.stringify(req.size)} (sizes: ${SIZES.join(', ')})`);
      }
      event = readInput(this.functionName, req.size);
    } else {
      throw new BadRequest("invoke needs 'size' or 'input'");
    }
    const timeoutMs = 'timeout_ms' in req ? req.timeout_ms : DEFAULT_TIMEOUT_MS;
    if (timeoutMs !== null && !(typeof timeoutMs === 'number' && timeoutMs > 0)) {
      throw new BadRequest('timeout_ms must be a positive number');
    }
    return [event, timeoutMs];
  }

  // Runs `handler` on `event` as one invocation, and encodes its answer.
  async run(handler, event, timeoutMs, reqId) {
    const t0 = performance.now();
    const deadline = timeoutMs === null ? null : t0 + timeoutMs;
    let timer = null;
    let output;
    try {
      output = await new Promise((resolve, reject) => {
        let settled = false;
        const settle = (err, value) => {
          if (settled) return;
          settled = true;
          if (err !== null && err !== undefined) reject(err);
          else resolve(value);
        };
        this.failCurrent = (err) => settle(err === undefined || err === null ? new Error('unhandled rejection') : err);
        if (timeoutMs !== null) {
          // a soft limit: it ends waiting for a promise; a handler that never
          // yields meets the worker's hard limit instead
          timer = setTimeout(() => settle(new TimeoutSignal()), Math.min(timeoutMs, 2147483647));
        }
        const context = makeContext(this, reqId, deadline, settle);
        const callback = (err, value) => settle(err, value);
        let result;
        try {
          result = handler(event, context, callback);
        } catch (e) {
          settle(e === undefined || e === null ? new Error(String(e)) : e);
          return;
        }
        if (result !== null && typeof result === 'object' && typeof result.then === 'function') {
          result.then(
            (v) => settle(null, v),
            (e) => settle(e === undefined || e === null ? new Error(String(e)) : e),
          );
        } else if (handler.length < 3) {
          // a plain function: what it returned is the output
          settle(null, result);
        }
        // otherwise the callback (or context.done/succeed/fail) settles it
      });
    } catch (e) {
      const execMs = sinceMs(t0);
      if (e instanceof TimeoutSignal) {
        return { ok: false, error: 'timeout', message: `invocation exceeded timeout_ms=${timeoutMs}`, exec_ms: execMs };
      }
      return Object.assign(functionError(e), { exec_ms: execMs });
    } finally {
      this.failCurrent = null;
      if (timer !== null) clearTimeout(timer);
    }
    const execMs = sinceMs(t0);
    let encoded;
    try {
      encoded = JSON.stringify(output === undefined ? null : output);
    } catch (e) {
      return { ok: false, error: 'bad_output', message: 'output is not JSON: ' + e.message };
    }
    if (encoded === undefined) {
      return { ok: false, error: 'bad_output', message: `output is not JSON: a ${typeof output}` };
    }
    if (Buffer.byteLength(encoded, 'utf8') > MAX_OUTPUT) {
      return {
        ok: false,
        error: 'bad_output',
        message: `output of ${Buffer.byteLength(encoded, 'utf8')} bytes exceeds the cap of ${MAX_OUTPUT} bytes`,
      };
    }
    // the output is already encoded: splice it in rather than encode it twice
    return { raw: `{"ok":true,"output":${encoded},"exec_ms":${JSON.stringify(execMs)}}` };
  }

  health() {
    return {
      ok: true,
      state: this.handler !== null ? 'ready' : 'idle',
      function: this.functionName,
      invocations: this.invocations,
      pid: process.pid,
      agent_version: AGENT_VERSION,
      runtime: 'nodejs',
    };
  }

  async prepareCheckpoint() {
    if (this.trampolineLeft) {
      return { ok: false, error: 'not_checkpointable', message: "a restored Node.js instance still maps the restorer's trampoline" };
    }
    if (this.beforeSnapshotHook !== null && !this.beforeSnapshotRan) {
      // once per instance, however often a snapshot is asked for
      this.beforeSnapshotRan = true;
      try {
        await this.beforeSnapshotHook();
      } catch (e) {
        return functionError(e, 'before_snapshot hook: ');
      }
    }
    await this.warmUp();
    // Node always holds threads (V8's platform workers, libuv) and
    // descriptors (epoll, eventfd, signal pipe) of its own: the checkpoint
    // captures them from outside; here the heap is made small first.
    collectGarbage();
    return { ok: true, op: 'prepare_checkpoint' };
  }

  // What every restored clone runs first, run before the snapshot with
  // nothing of the function's until V8 runs it as it runs it in a warm
  // process: V8 compiles a function on its first call, gives it inline
  // caches only after a few (until then every property access is a call
  // into the runtime), compiles a regular expression to machine code on
  // its second use, and makes an object's hidden classes on the first
  // parse of each message's shape; OpenSSL looks a cipher up on its first
  // use, Node makes its timer list on the first setTimeout. Done here, it
  // is all in the snapshot rather than in each clone's resume and first
  // invocation (measured: the clone's `restored` and first invocation
  // cost a third of what they cost warmed once). The rounds go through
  // the request paths themselves (decode, dispatch, encode; nothing is
  // written to the socket): a `restored` with a throwaway seed (the
  // function's `reseed` hook not called) and invocations of a handler of
  // the agent's own on the suite's input if the function has one and on
  // an inline event. The instance's own state is left as it was: the
  // generators' states and the crypto module's seed are put back (the
  // mixing stays off in an instance never restored).
  async warmUp() {
    const saved = [Uint32Array.from(rngState), Uint32Array.from(idState), cryptoSeed, cryptoStream];
    const own = async (event, context) => ({ echo: event, id: context.awsRequestId });
    const invocations = [{ op: 'invoke', input: { warm: true }, timeout_ms: DEFAULT_TIMEOUT_MS, request_id: 'warm' }];
    if (this.functionName !== USER_FLAG && isFile(path.join(INPUTS_DIR, this.functionName, SIZES[0] + '.json'))) {
      invocations.push({ op: 'invoke', size: SIZES[0] });
    }
    const wire = (req) => decodeRequest(Buffer.from(JSON.stringify(req), 'utf8'))[0];
    for (let round = 0; round < WARM_ROUNDS; round++) {
      const seed = cryptoOriginals.randomBytes(32).toString('hex');
      encodeReply(this.restored(wire({ op: 'restored', seed }), null));
      crypto.randomBytes(16);
      uuidOf(crypto.randomBytes(16));
      // through invoke() itself: a restored clone's first invocation
      // compiles no agent code (measured: 0.3 ms when invoke() was new)
      for (const req of invocations) {
        encodeReply(await this.invoke(wire(req), own));
      }
    }
    rngState.set(saved[0]);
    idState.set(saved[1]);
    // a restored instance snapshotted again keeps mixing under its own seed
    [, , cryptoSeed, cryptoStream] = saved;
  }

  // `mod`: the module whose `reseed` hook runs (none in the warm-up)
  restored(req, mod = this.module) {
    const seedBytes = seedOf(req);
    const range = req.unmap;
    if (range !== undefined && range !== null) {
      // the restorer's trampoline (a restore with one thread): checked,
      // but left mapped (unmapping it needs native code), so this instance
      // cannot be checkpointed again
      const ok = Array.isArray(range) && range.length === 2 && range.every((x) => Number.isInteger(x) && x > 0 && x < 2 ** 47);
      if (!ok) throw new BadRequest('unmap needs [address, length]');
      this.trampolineLeft = true;
    }
    const reseeded = reseedAll(seedBytes, mod);
    return { ok: true, state: 'restored', reseeded };
  }

  async afterRestore(req) {
    const instanceId = req.instance_id;
    if (typeof instanceId !== 'string') throw new BadRequest("after_restore needs 'instance_id': a string");
    process.env.THAW_INSTANCE_ID = instanceId;
    if (this.afterRestoreHook === null) return { ok: true, op: 'after_restore', hook: false, hook_ms: 0.0 };
    const t0 = performance.now();
    try {
      await this.afterRestoreHook(instanceId);
    } catch (e) {
      return functionError(e, 'after_restore hook: ');
    }
    return { ok: true, op: 'after_restore', hook: true, hook_ms: sinceMs(t0) };
  }
}

// Re-seeds what clones of one snapshot would otherwise share: Math.random
// (deterministic in the seed, as the Python agent's `random`), the
// crypto module's randomness (the seed mixed into what it returns from now
// on), and the function's own generators through its `reseed(seed)` hook.
function reseedAll(seed, mod) {
  const done = [];
  seedMathRandom(seed);
  done.push('Math.random');
  reseedCrypto(seed);
  done.push('crypto');
  if (mod && typeof mod.reseed === 'function') {
    mod.reseed(seed);
    done.push('function');
  }
  return done;
}

// OpenSSL's generator state is in the snapshot and every clone would draw
// the same bytes from it; JavaScript cannot re-seed it. So after a restore
// crypto.randomBytes, randomFillSync and randomUUID XOR OpenSSL's output
// with a keystream of ChaCha20 under a key derived from this clone's seed:
// unpredictable to anyone who does not know the seed, different in every
// clone. Not covered: what reaches OpenSSL's generator without passing
// through these (key generation, webcrypto, randomInt).
const cryptoOriginals = {
  randomBytes: crypto.randomBytes,
  randomFillSync: crypto.randomFillSync,
};
// this clone's seed, until its keystream is first needed (keyed then:
// most invocations never draw)
let cryptoSeed = null;
let cryptoStream = null;

function keystreamOf(seed) {
  const key = crypto.createHash('sha256').update('thaw crypto').update(seed).digest();
  return crypto.createCipheriv('chacha20', key, Buffer.alloc(16));
}

function keystream(n) {
  if (cryptoStream === null) cryptoStream = keystreamOf(cryptoSeed);
  return cryptoStream.update(Buffer.alloc(n));
}

function mixInto(buf, offset, size) {
  // off until a restore gives this clone its seed (the warm-up leaves the
  // wrappers installed, and the instance it warmed may never be restored)
  if (cryptoSeed === null) return;
  const view = Buffer.from(buf.buffer, buf.byteOffset + offset, size);
  const ks = keystream(size);
  for (let i = 0; i < size; i++) view[i] ^= ks[i];
}

function reseedCrypto(seed) {
  cryptoSeed = Buffer.from(seed);
  cryptoStream = null;
  if (crypto.randomBytes.thawMixed) return;
  const randomBytes = function randomBytes(size, cb) {
    if (typeof cb === 'function') {
      return cryptoOriginals.randomBytes(size, (err, buf) => {
        if (!err) mixInto(buf, 0, buf.length);
        cb(err, buf);
      });
    }
    const buf = cryptoOriginals.randomBytes(size);
    mixInto(buf, 0, buf.length);
    return buf;
  };
  randomBytes.thawMixed = true;
  const randomFillSync = function randomFillSync(buf, offset, size) {
    cryptoOriginals.randomFillSync(buf, offset, size);
    const bytes = ArrayBuffer.isView(buf) ? buf.byteLength : buf.byteLength;
    const off = offset === undefined ? 0 : offset * (ArrayBuffer.isView(buf) ? buf.BYTES_PER_ELEMENT || 1 : 1);
    const len = size === undefined ? bytes - off : size * (ArrayBuffer.isView(buf) ? buf.BYTES_PER_ELEMENT || 1 : 1);
    const u8 = ArrayBuffer.isView(buf) ? new Uint8Array(buf.buffer, buf.byteOffset, buf.byteLength) : new Uint8Array(buf);
    mixInto(u8, off, len);
    return buf;
  };
  crypto.randomBytes = randomBytes;
  crypto.randomFillSync = randomFillSync;
  crypto.randomUUID = function randomUUID() {
    return uuidOf(randomBytes(16));
  };
}

let gcFn = null;

function collectGarbage() {
  // V8's gc() without exposing it to the function's globals
  if (gcFn === null) {
    require('v8').setFlagsFromString('--expose-gc');
    gcFn = require('vm').runInNewContext('gc');
  }
  gcFn();
}

// ---------------------------------------------------------------- loop

async function handle(agent, req) {
  const op = req.op;
  if (typeof op !== 'string') throw new BadRequest("missing 'op'");
  switch (op) {
    case 'load':
      return agent.load();
    case 'invoke':
      return agent.invoke(req);
    case 'health':
      return agent.health();
    case 'prepare_checkpoint':
      return agent.prepareCheckpoint();
    case 'restored':
      return agent.restored(req);
    case 'after_restore':
      return agent.afterRestore(req);
    case 'exit':
      send({ ok: true, op: 'exit' });
      process.exit(0);
      break;
    default:
      throw new BadRequest(`unknown op ${JSON.stringify(op)}`);
  }
  return null;
}

async function serve(agent) {
  for (;;) {
    let req;
    let err;
    try {
      [req, err] = recv();
    } catch (e) {
      if (e instanceof EOFError) return;
      throw e;
    }
    if (err !== null) {
      send(bad(err));
      continue;
    }
    let reply;
    try {
      reply = await handle(agent, req);
    } catch (e) {
      if (e instanceof BadRequest) reply = bad(e.message);
      else reply = functionError(e);
    }
    try {
      send(reply);
    } catch (e) {
      if (e.code === 'EPIPE') return;
      throw e;
    }
  }
}

function main(argv) {
  if (argv.length !== 1) {
    fs.writeSync(2, 'usage: node agent.js FUNCTION\n');
    return 2;
  }
  try {
    fs.fstatSync(CTRL_FD);
  } catch (e) {
    fs.writeSync(2, `agent: fd ${CTRL_FD} (control socket) is not open\n`);
    return 2;
  }
  installMathRandom();
  const agent = new Agent(argv[0]);
  // a rejection or exception outside the handler's own chain fails the
  // invocation in flight (Lambda reports it as the invocation's error)
  process.on('unhandledRejection', (reason) => {
    if (agent.failCurrent) agent.failCurrent(reason);
    else log('unhandled rejection outside an invocation: ' + String(reason));
  });
  process.on('uncaughtException', (e) => {
    if (agent.failCurrent) agent.failCurrent(e);
    else log('uncaught exception outside an invocation: ' + (e && e.stack ? e.stack : String(e)));
  });
  process.on('SIGPIPE', () => {});
  serve(agent).then(
    () => process.exit(0),
    (e) => {
      log('serving failed: ' + (e && e.stack ? e.stack : String(e)));
      process.exit(1);
    },
  );
  return null;
}

const status = main(process.argv.slice(2));
if (status !== null) process.exitCode = status;
