// getHost(port): HTTP servers in the sandbox reached through spaced, both on spaced's
// own port (HTTP terminated by spaced, one agent tcp channel per request, WebSocket
// through a 101 hand-over) and on the sandbox-port listener (SPACE_E2B_PORT_LISTEN: a
// byte pipe after the first head). The guest runs a small Python server (python
// template): echo of request bodies (Content-Length or chunked) as "<bytes> <sha256>",
// chunked downloads of any size, responses cut short mid-body, and a WebSocket echo.
// A sandbox created with network.allowPublicTraffic = false answers only requests that
// carry its trafficAccessToken (e2b-traffic-access-token), on both ports.
import crypto from 'node:crypto'
import http from 'node:http'
import net from 'node:net'
import { assert, Sandbox, step, main, killLater, eventually } from './lib.mjs'

const PORT = 8000
const MAIN = new URL(process.env.E2B_SANDBOX_URL)
const LISTEN = process.env.SPACE_TEST_PORT_LISTEN // "127.0.0.1:<port>", set by the driver

const SERVER = String.raw`
import base64, hashlib, http.server, struct

class H(http.server.BaseHTTPRequestHandler):
    protocol_version = 'HTTP/1.1'
    def log_message(self, *a): pass
    def body(self):
        if self.headers.get('Transfer-Encoding', '').lower() == 'chunked':
            while True:
                n = int(self.rfile.readline().split(b';')[0], 16)
                if n == 0:
                    while self.rfile.readline() not in (b'\r\n', b'\n', b''): pass
                    return
                yield self.rfile.read(n)
                self.rfile.readline()
        left = int(self.headers.get('Content-Length') or 0)
        while left:
            d = self.rfile.read(min(left, 65536))
            if not d: return
            left -= len(d)
            yield d
    def reply(self, text):
        out = text.encode()
        self.send_response(200)
        self.send_header('Content-Type', 'text/plain')
        self.send_header('Content-Length', str(len(out)))
        self.end_headers()
        self.wfile.write(out)
    def do_POST(self):
        h, n = hashlib.sha256(), 0
        for d in self.body():
            h.update(d); n += len(d)
        self.reply('%d %s' % (n, h.hexdigest()))
    def do_GET(self):
        if self.headers.get('Upgrade', '').lower() == 'websocket':
            return self.ws()
        if self.path in ('/cut', '/cutlen'):
            # A response whose server dies mid-body: no last chunk / short of the length.
            self.send_response(200)
            if self.path == '/cut':
                self.send_header('Transfer-Encoding', 'chunked')
            else:
                self.send_header('Content-Length', '100000')
            self.end_headers()
            self.wfile.write(b'5\r\nhello\r\n' if self.path == '/cut' else b'hello')
            self.wfile.flush()
            self.close_connection = True
            return
        if self.path.startswith('/big?n='):
            left = int(self.path[7:])
            self.send_response(200)
            self.send_header('Transfer-Encoding', 'chunked')
            self.end_headers()
            block = bytes(range(256)) * 256
            while left:
                d = block[:min(left, len(block))]
                self.wfile.write(b'%x\r\n%s\r\n' % (len(d), d))
                left -= len(d)
            self.wfile.write(b'0\r\n\r\n')
            return
        self.reply('hello ' + self.path)
    def ws(self):
        key = self.headers['Sec-WebSocket-Key'].encode()
        acc = base64.b64encode(hashlib.sha1(key + b'258EAFA5-E914-47DA-95CA-C5AB0DC85B11').digest())
        self.wfile.write(b'HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n'
                         b'Connection: Upgrade\r\nSec-WebSocket-Accept: ' + acc + b'\r\n\r\n')
        self.wfile.flush()
        self.close_connection = True
        r = self.rfile
        while True:
            h = r.read(2)
            if len(h) < 2: return
            op, n = h[0] & 15, h[1] & 127
            if n == 126: n = struct.unpack('>H', r.read(2))[0]
            elif n == 127: n = struct.unpack('>Q', r.read(8))[0]
            mask = r.read(4)
            data = bytes(b ^ mask[i % 4] for i, b in enumerate(r.read(n)))
            if op == 8:
                self.wfile.write(b'\x88\x00'); self.wfile.flush(); return
            size = bytes([n]) if n < 126 else b'\x7e' + struct.pack('>H', n) if n < 65536 else b'\x7f' + struct.pack('>Q', n)
            self.wfile.write(bytes([0x80 | op]) + size + data)
            self.wfile.flush()

http.server.ThreadingHTTPServer(('127.0.0.1', ${PORT}), H).serve_forever()
`

// Where a request goes: spaced's own port, or the sandbox-port listener.
function endpoint(which) {
  if (which === 'main') return { host: MAIN.hostname, port: Number(MAIN.port) }
  const [host, port] = LISTEN.split(':')
  return { host, port: Number(port) }
}

function request(which, host, { method = 'GET', path = '/', body, agent, headers = {} } = {}) {
  const ep = endpoint(which)
  return new Promise((resolve, reject) => {
    // No pooling unless asked: a listener connection stays bound to its first Host.
    const req = http.request({ ...ep, method, path, agent: agent ?? false, headers: { Host: host, ...headers } }, (res) => {
      const chunks = []
      const hash = crypto.createHash('sha256')
      let n = 0
      res.on('data', (d) => { hash.update(d); n += d.length; if (n < 4096) chunks.push(d) })
      res.on('end', () => resolve({ status: res.statusCode, headers: res.headers, n,
        sha: hash.digest('hex'), text: Buffer.concat(chunks).toString(), reused: req.reusedSocket }))
    })
    req.on('error', reject)
    if (body) {
      // Streamed in pieces without a length: chunked, honouring backpressure.
      let i = 0
      const pump = () => {
        while (i < body.length) {
          const piece = body.subarray(i, i + 65536)
          i += piece.length
          if (!req.write(piece)) return req.once('drain', pump)
        }
        req.end()
      }
      pump()
    } else {
      req.end()
    }
  })
}

function pattern(n) {
  const block = Buffer.alloc(65536)
  for (let i = 0; i < block.length; i++) block[i] = i % 256
  const out = Buffer.alloc(n)
  for (let o = 0; o < n; o += block.length) block.copy(out, o, 0, Math.min(block.length, n - o))
  return out
}

const sha = (b) => crypto.createHash('sha256').update(b).digest('hex')

// A minimal WebSocket client over a raw socket (masked frames, as RFC 6455 requires).
function wsFrame(op, payload) {
  const mask = crypto.randomBytes(4)
  const n = payload.length
  const len = n < 126 ? Buffer.from([0x80 | n]) : n < 65536
    ? Buffer.from([0x80 | 126, n >> 8, n & 255])
    : Buffer.concat([Buffer.from([0x80 | 127]), (() => { const b = Buffer.alloc(8); b.writeBigUInt64BE(BigInt(n)); return b })()])
  const data = Buffer.from(payload)
  for (let i = 0; i < n; i++) data[i] ^= mask[i % 4]
  return Buffer.concat([Buffer.from([0x80 | op]), len, mask, data])
}

async function wsEcho(which, host, messages) {
  const ep = endpoint(which)
  const sock = net.connect(ep.port, ep.host)
  const key = crypto.randomBytes(16).toString('base64')
  let buf = Buffer.alloc(0)
  let wake = null
  let ended = false
  sock.on('data', (d) => { buf = Buffer.concat([buf, d]); if (wake) wake() })
  sock.on('end', () => { ended = true; if (wake) wake() })
  sock.on('error', () => { ended = true; if (wake) wake() })
  const more = () => new Promise((r) => { wake = r })
  sock.write(`GET /ws HTTP/1.1\r\nHost: ${host}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n` +
    `Sec-WebSocket-Key: ${key}\r\nSec-WebSocket-Version: 13\r\n\r\n`)
  while (buf.indexOf('\r\n\r\n') < 0) { assert.ok(!ended, 'connection ended before the 101'); await more() }
  const headEnd = buf.indexOf('\r\n\r\n')
  const head = buf.subarray(0, headEnd).toString()
  buf = buf.subarray(headEnd + 4)
  assert.match(head, /^HTTP\/1\.1 101 /)
  const accept = crypto.createHash('sha1').update(key + '258EAFA5-E914-47DA-95CA-C5AB0DC85B11').digest('base64')
  assert.ok(head.includes(`Sec-WebSocket-Accept: ${accept}`), head)
  const readFrame = async () => {
    for (;;) {
      if (buf.length >= 2) {
        let n = buf[1] & 127, off = 2
        if (n === 126 && buf.length >= 4) { n = buf.readUInt16BE(2); off = 4 }
        else if (n === 127 && buf.length >= 10) { n = Number(buf.readBigUInt64BE(2)); off = 10 }
        if (!(n >= 126 && off === 2) && buf.length >= off + n) {
          const f = { op: buf[0] & 15, data: buf.subarray(off, off + n) }
          buf = buf.subarray(off + n)
          return f
        }
      }
      assert.ok(!ended, 'connection ended inside a frame')
      await more()
    }
  }
  for (const m of messages) {
    sock.write(wsFrame(typeof m === 'string' ? 1 : 2, Buffer.from(m)))
    const f = await readFrame()
    assert.equal(f.op, typeof m === 'string' ? 1 : 2)
    assert.ok(Buffer.from(m).equals(f.data), `echo of a ${m.length}-byte message`)
  }
  sock.write(wsFrame(8, Buffer.alloc(0)))
  assert.equal((await readFrame()).op, 8)
  while (!ended) await more() // the server closes; the close reaches us through spaced
  sock.destroy()
}

// The checks run once through each way in ('main' = spaced's port, 'listen' = listener).
async function keepAlive(which, host) {
  const agent = new http.Agent({ keepAlive: true, maxSockets: 1 })
  for (let i = 0; i < 4; i++) {
    const r = await request(which, host, { path: `/k${i}`, agent })
    assert.equal(r.status, 200)
    assert.equal(r.text, `hello /k${i}`)
    if (i > 0) assert.equal(r.reused, true, 'the client connection was reused')
  }
  agent.destroy()
}

async function upload(which, host) {
  const body = pattern(8 << 20)
  const r = await request(which, host, { method: 'POST', path: '/upload', body })
  assert.equal(r.status, 200)
  assert.equal(r.text, `${body.length} ${sha(body)}`)
}

async function download(which, host) {
  const n = 16 << 20
  const r = await request(which, host, { path: `/big?n=${n}` })
  assert.equal(r.status, 200)
  assert.equal(r.n, n)
  assert.equal(r.sha, sha(pattern(n)))
}

// A response the guest cuts short must reach the client as an error, never as a
// complete-looking body.
function truncated(which, host, path) {
  const ep = endpoint(which)
  return new Promise((resolve) => {
    const req = http.request({ ...ep, path, agent: false, headers: { Host: host } }, (res) => {
      let n = 0
      res.on('data', (d) => { n += d.length })
      res.on('end', () => resolve({ complete: true, n }))
      res.on('error', () => resolve({ complete: false, n }))
      res.on('aborted', () => resolve({ complete: false, n }))
    })
    req.on('error', () => resolve({ complete: false, n: 0 }))
    req.end()
  })
}

async function refused(which, sbx) {
  const r = await request(which, sbx.getHost(8089), { path: '/' })
  assert.equal(r.status, 502)
  assert.match(r.text, /connection_refused/)
}

await main(async () => {
  assert.ok(LISTEN, 'SPACE_TEST_PORT_LISTEN is not set (the driver starts spaced with a listener)')
  const sbx = killLater(await Sandbox.create('python', { timeoutMs: 600_000 }))
  const host = sbx.getHost(PORT)

  await step('a Python HTTP server in the sandbox answers getHost on both ports', async () => {
    await sbx.files.write('/tmp/server.py', SERVER)
    await sbx.commands.run('python3 /tmp/server.py', { background: true })
    for (const which of ['main', 'listen']) {
      const r = await eventually(async () => {
        const x = await request(which, host, { path: '/hello' })
        return x.status === 200 ? x : null
      }, `the guest server via ${which}`)
      assert.equal(r.text, 'hello /hello')
    }
  })
  await step('main: keep-alive, several requests on one client connection', () => keepAlive('main', host))
  await step('listen: keep-alive, several requests on one client connection', () => keepAlive('listen', host))
  await step('main: a streamed (chunked) 8 MiB upload arrives whole', () => upload('main', host))
  await step('listen: a streamed (chunked) 8 MiB upload arrives whole', () => upload('listen', host))
  await step('main: a chunked 16 MiB download arrives whole', () => download('main', host))
  await step('listen: a chunked 16 MiB download arrives whole', () => download('listen', host))
  await step('main: a port nobody listens on is a 502 naming the refusal', () => refused('main', sbx))
  await step('listen: a port nobody listens on is a 502 naming the refusal', () => refused('listen', sbx))
  await step('listen: WebSocket echo (text, 100 KB binary, close both ways)', async () => {
    await wsEcho('listen', host, ['hello', 'x'.repeat(300), crypto.randomBytes(100_000)])
  })
  await step('main: WebSocket echo through the 101 hand-over (text, 100 KB and 3 MB binary, close both ways)', async () => {
    await wsEcho('main', host, ['hello', 'x'.repeat(300), crypto.randomBytes(100_000),
      crypto.randomBytes(3 << 20)])
  })
  await step('main: a response cut mid-body (chunked, Content-Length) is an error for the client', async () => {
    for (const path of ['/cut', '/cutlen']) {
      const r = await truncated('main', host, path)
      assert.equal(r.complete, false, `${path}: the client saw a complete response of ${r.n} bytes`)
      assert.equal(r.n, 5, `${path}: the bytes before the cut arrive`)
    }
    // The server keeps serving after the aborts.
    assert.equal((await request('main', host, { path: '/after' })).text, 'hello /after')
  })
  await step('listen: an unknown sandbox is a 502, a bad Host a 400', async () => {
    assert.equal((await request('listen', `${PORT}-sb0000000000000000.localhost`)).status, 502)
    assert.equal((await request('listen', 'example.com')).status, 400)
  })
  await step('a public sandbox has no traffic token', () => {
    assert.equal(sbx.trafficAccessToken, undefined)
  })
  await step('allowPublicTraffic: false: getHost needs trafficAccessToken on both ports; without it, the unknown sandbox\'s answer', async () => {
    const priv = killLater(await Sandbox.create('python', { timeoutMs: 600_000, network: { allowPublicTraffic: false } }))
    const token = priv.trafficAccessToken
    assert.ok(typeof token === 'string' && token.length > 32, `trafficAccessToken: ${token}`)
    const withToken = { headers: { 'e2b-traffic-access-token': token } }
    await priv.files.write('/tmp/server.py', SERVER)
    await priv.commands.run('python3 /tmp/server.py', { background: true })
    const phost = priv.getHost(PORT)
    const ghost = `${PORT}-sb0000000000000000.localhost`
    for (const which of ['main', 'listen']) {
      const r = await eventually(async () => {
        const x = await request(which, phost, { path: '/p', ...withToken })
        return x.status === 200 ? x : null
      }, `the private sandbox's server via ${which}`)
      assert.equal(r.text, 'hello /p')
      const unknown = await request(which, ghost, { path: '/p' })
      // A wrong token: the last digit changed (a token ending in '0' was sent unchanged
      // before, 1 time in 16, and rightly accepted).
      const wrong = token.slice(0, -1) + (token.endsWith('0') ? '1' : '0')
      for (const headers of [{}, { 'e2b-traffic-access-token': wrong }, { 'e2b-traffic-access-token': sbx.trafficAccessToken ?? 'x' }]) {
        const x = await request(which, phost, { path: '/p', headers })
        assert.equal(x.status, unknown.status, `${which}: ${JSON.stringify(headers)}`)
        assert.equal(x.text.replace(priv.sandboxId, '<id>'), unknown.text.replace('sb0000000000000000', '<id>'))
      }
    }
    // Connecting again hands out the same token (it survives in the daemon, not the client).
    const again = await Sandbox.connect(priv.sandboxId)
    assert.equal(again.trafficAccessToken, token)
    await priv.kill()
  })
})
