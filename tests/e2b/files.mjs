// files.*: read/write (text, binary, multipart, octet-stream, gzip, several files),
// list, exists, getInfo, makeDir, remove, rename, watchDir; uploadUrl/downloadUrl.
import { assert, sdk, Sandbox, step, main, killLater, rejectsWith, eventually, sdkVersion } from './lib.mjs'

await main(async () => {
  const sbx = killLater(await Sandbox.create('base', { timeoutMs: 300_000 }))
  const fs = sbx.files
  const bin = new Uint8Array(70000).map((_, i) => (i * 31 + 7) & 255)

  await step('write and read text (absolute and home-relative paths)', async () => {
    const w = await fs.write('/home/user/a.txt', 'content-A')
    assert.equal(w.path, '/home/user/a.txt')
    assert.equal(w.name, 'a.txt')
    assert.equal(await fs.read('/home/user/a.txt'), 'content-A')
    const rel = await fs.write('rel/dir/b.txt', 'B')
    assert.equal(rel.path, '/home/user/rel/dir/b.txt')
    assert.equal(await fs.read('~/rel/dir/b.txt'), 'B')
  })
  await step('binary round trip (multipart upload)', async () => {
    await fs.write('/tmp/bin.dat', bin)
    const back = await fs.read('/tmp/bin.dat', { format: 'bytes' })
    assert.deepEqual(Buffer.from(back), Buffer.from(bin))
  })
  await step('octet-stream and gzip uploads', async () => {
    await fs.write('/tmp/octet.dat', bin, { useOctetStream: true })
    assert.deepEqual(Buffer.from(await fs.read('/tmp/octet.dat', { format: 'bytes' })), Buffer.from(bin))
    await fs.write('/tmp/gz.txt', 'compressed '.repeat(1000), { gzip: true })
    assert.equal(await fs.read('/tmp/gz.txt', { gzip: true }), 'compressed '.repeat(1000))
    // Downloads are gzipped for clients that accept it (fetch decodes transparently).
    const r = await fetch(process.env.E2B_SANDBOX_URL + '/files?path=/tmp/gz.txt', {
      headers: { 'E2b-Sandbox-Id': sbx.sandboxId, 'X-Access-Token': sbx.envdAccessToken, 'Accept-Encoding': 'gzip' } })
    assert.equal(r.headers.get('content-encoding'), 'gzip')
    assert.equal(await r.text(), 'compressed '.repeat(1000))
  })
  await step('large streamed upload (chunked octet-stream) and streamed download', async () => {
    const size = 8 * 1024 * 1024
    const chunk = new Uint8Array(64 * 1024).map((_, i) => (i * 13) & 255)
    let sent = 0
    const body = new ReadableStream({
      pull(ctrl) {
        if (sent >= size) return ctrl.close()
        ctrl.enqueue(chunk)
        sent += chunk.length
      },
    })
    await fs.write('/tmp/big.dat', body)
    const info = await fs.getInfo('/tmp/big.dat')
    assert.equal(info.size, size)
    const stream = await fs.read('/tmp/big.dat', { format: 'stream' })
    let got = 0, ok = true
    for await (const part of stream) {
      for (let i = 0; i < part.length; i++) ok = ok && part[i] === chunk[(got + i) % chunk.length]
      got += part.length
    }
    assert.equal(got, size)
    assert.ok(ok, 'downloaded bytes match the upload')
  })
  await step('empty file', async () => {
    await fs.write('/tmp/empty', '')
    assert.equal(await fs.read('/tmp/empty'), '')
  })
  await step('several files in one request', async () => {
    const infos = await fs.write([{ path: '/tmp/m/1.txt', data: 'one' }, { path: '/tmp/m/2.txt', data: 'two' }])
    assert.deepEqual(infos.map((i) => i.path).sort(), ['/tmp/m/1.txt', '/tmp/m/2.txt'])
    assert.equal(await fs.read('/tmp/m/2.txt'), 'two')
    if (typeof fs.writeFiles === 'function') { // writeFiles arrived in later 2.x SDKs
      const more = await fs.writeFiles([{ path: '/tmp/wf/3.txt', data: 'three' }, { path: '/tmp/wf/4.txt', data: 'four' }])
      assert.deepEqual(more.map((i) => i.path).sort(), ['/tmp/wf/3.txt', '/tmp/wf/4.txt'])
      assert.equal(await fs.read('/tmp/wf/4.txt'), 'four')
    }
  })
  await step('read a missing file -> FileNotFoundError', async () => {
    await rejectsWith(fs.read('/nope/missing.txt'), sdk.FileNotFoundError ?? sdk.NotFoundError)
  })
  await step('list, exists, getInfo', async () => {
    const entries = await fs.list('/tmp/m')
    assert.deepEqual(entries.map((e) => [e.name, e.type, e.path]).sort(),
      [['1.txt', 'file', '/tmp/m/1.txt'], ['2.txt', 'file', '/tmp/m/2.txt']])
    assert.equal(await fs.exists('/tmp/m/1.txt'), true)
    assert.equal(await fs.exists('/tmp/m/none'), false)
    const info = await fs.getInfo('/tmp/bin.dat')
    assert.equal(info.type, 'file')
    assert.equal(info.size, bin.length)
    assert.match(info.permissions, /^-rw/)
    assert.ok(info.modifiedTime instanceof Date && !isNaN(info.modifiedTime))
    const dir = await fs.getInfo('/tmp/m')
    assert.equal(dir.type, 'dir')
    await rejectsWith(fs.getInfo('/tmp/m/none'), sdk.FileNotFoundError ?? sdk.NotFoundError)
    const deep = await fs.list('/home/user', { depth: 3 })
    assert.ok(deep.some((e) => e.path === '/home/user/rel/dir/b.txt'))
  })
  await step('makeDir, rename, remove', async () => {
    assert.equal(await fs.makeDir('/tmp/d1/d2'), true)
    assert.equal(await fs.makeDir('/tmp/d1/d2'), false)
    const moved = await fs.rename('/tmp/m/1.txt', '/tmp/d1/d2/one.txt')
    assert.equal(moved.path, '/tmp/d1/d2/one.txt')
    assert.equal(await fs.read('/tmp/d1/d2/one.txt'), 'one')
    await fs.remove('/tmp/d1')
    assert.equal(await fs.exists('/tmp/d1'), false)
  })
  await step('watchDir reports creates and writes', async () => {
    await fs.makeDir('/tmp/w')
    const events = []
    const h = await fs.watchDir('/tmp/w', (e) => events.push(e))
    await fs.write('/tmp/w/x.txt', 'x')
    await eventually(async () => events.some((e) => e.name === 'x.txt'), 'a watch event for x.txt')
    assert.ok(events.every((e) => typeof e.type === 'string'))
    await h.stop()
    await rejectsWith(fs.watchDir('/tmp/no-such-dir', () => {}), sdk.SandboxError)
  })
  // envd 0.6.2/0.6.3 features; the SDK offers them from 2.51 on (older ones lack the options).
  const modern = Number(sdkVersion.split('.')[1]) >= 51
  await step('write metadata (X-Metadata-*): returned, and kept in getInfo and list', async () => {
    if (!modern) return
    const meta = { owner: 'alice', 'build-id': '42' }
    const w = await fs.write('/home/user/meta.txt', 'm', { metadata: meta })
    assert.deepEqual(w.metadata, meta)
    assert.deepEqual((await fs.getInfo('/home/user/meta.txt')).metadata, meta)
    const listed = (await fs.list('/home/user')).find((e) => e.name === 'meta.txt')
    assert.deepEqual(listed.metadata, meta)
    assert.equal((await fs.getInfo('/home/user/a.txt')).metadata, undefined)
    const o = await fs.write('/home/user/meta2.txt', 'o', { metadata: { k: 'v' }, useOctetStream: true })
    assert.deepEqual(o.metadata, { k: 'v' })
    assert.deepEqual((await fs.getInfo('/home/user/meta2.txt')).metadata, { k: 'v' })
  })
  await step('watchDir({includeEntry}) events carry the entry', async () => {
    if (!modern) return
    await fs.makeDir('/tmp/we')
    const events = []
    const h = await fs.watchDir('/tmp/we', (e) => events.push(e), { includeEntry: true })
    await fs.write('/tmp/we/e.txt', 'entry')
    const ev = await eventually(async () => events.find((e) => e.name === 'e.txt' && e.entry), 'an event with an entry')
    assert.equal(ev.entry.name, 'e.txt')
    assert.equal(ev.entry.path, '/tmp/we/e.txt')
    assert.equal(ev.entry.type, 'file')
    await h.stop()
  })
  await step('polling watcher RPCs (Python sync SDK): create, events, remove', async () => {
    const rpc = async (method, body) => {
      const r = await fetch(process.env.E2B_SANDBOX_URL + '/filesystem.Filesystem/' + method, {
        method: 'POST', body: JSON.stringify(body),
        headers: { 'Content-Type': 'application/json', 'E2b-Sandbox-Id': sbx.sandboxId, 'X-Access-Token': sbx.envdAccessToken } })
      return { status: r.status, json: await r.json() }
    }
    await fs.makeDir('/tmp/pw')
    const c = await rpc('CreateWatcher', { path: '/tmp/pw', recursive: false })
    assert.equal(c.status, 200)
    const id = c.json.watcherId
    assert.ok(id)
    await fs.write('/tmp/pw/p.txt', 'p')
    const seen = await eventually(async () => {
      const e = await rpc('GetWatcherEvents', { watcher_id: id })
      return (e.json.events || []).find((x) => x.name === 'p.txt' && x.type.startsWith('EVENT_TYPE_'))
    }, 'polled watcher events')
    assert.ok(seen)
    assert.equal((await rpc('RemoveWatcher', { watcherId: id })).status, 200)
    const gone = await rpc('GetWatcherEvents', { watcherId: id })
    assert.equal(gone.status, 404)
    assert.equal(gone.json.code, 'not_found')
  })
  await step('uploadUrl / downloadUrl signatures', async () => {
    const up = await sbx.uploadUrl('/tmp/signed.txt')
    assert.match(up, /signature=v1_/)
    const form = new FormData()
    form.append('file', new Blob(['signed upload']), '/tmp/signed.txt')
    const r = await fetch(up, { method: 'POST', body: form, headers: process.env.SPACE_TEST_VIA_CONTROL ? { 'E2b-Sandbox-Id': sbx.sandboxId } : {} })
    assert.equal(r.status, 200, await r.clone().text())
    const down = await sbx.downloadUrl('/tmp/signed.txt', { useSignatureExpiration: 60 })
    if (process.env.SPACE_TEST_VIA_CONTROL) {
      // Through a control daemon only the node that minted the sandbox's token can tell
      // which sandbox a signature belongs to, so a URL that names none (E2B_SANDBOX_URL
      // set: no "<port>-<id>.<domain>" host) is refused, saying how to name it.
      const lost = await fetch(down)
      assert.equal(lost.status, 502)
      assert.match((await lost.json()).message, /names no sandbox/)
    }
    const d = await fetch(down, process.env.SPACE_TEST_VIA_CONTROL ? { headers: { 'E2b-Sandbox-Id': sbx.sandboxId } } : {})
    assert.equal(d.status, 200) // on a single daemon the signature alone finds the sandbox
    assert.equal(await d.text(), 'signed upload')
    const bad = await fetch(down.replace(/signature=v1_[^&]+/, 'signature=v1_AAAA'), { headers: { 'E2b-Sandbox-Id': sbx.sandboxId } })
    assert.equal(bad.status, 401)
    assert.equal((await bad.json()).code, 401)
  })
})
