// commands.* and pty.*: foreground and background runs, streaming callbacks, stdin,
// closeStdin, kill, list, connect, cwd/envs/user, exit errors, PTY.
import http from 'node:http'
import { assert, sdk, Sandbox, step, main, killLater, rejectsWith, eventually, sleep } from './lib.mjs'

// GET through spaced with a chosen Host header (fetch() may not set Host).
function getVia(host, path) {
  const u = new URL(process.env.E2B_SANDBOX_URL)
  return new Promise((resolve, reject) => {
    http.get({ host: u.hostname, port: u.port, path, headers: { Host: host } }, (res) => {
      let body = ''
      res.on('data', (d) => (body += d))
      res.on('end', () => resolve({ status: res.statusCode, body }))
    }).on('error', reject)
  })
}

await main(async () => {
  const sbx = killLater(await Sandbox.create('base', { timeoutMs: 300_000 }))
  const cmd = sbx.commands

  await step('foreground run with streaming callbacks', async () => {
    const out = [], err = []
    const r = await cmd.run('echo one; echo two >&2; printf "three"', {
      onStdout: (d) => out.push(d), onStderr: (d) => err.push(d) })
    assert.equal(r.exitCode, 0)
    assert.equal(r.stdout, 'one\nthree')
    assert.equal(r.stderr, 'two\n')
    assert.equal(out.join(''), 'one\nthree')
    assert.equal(err.join(''), 'two\n')
  })
  await step('exit code != 0 -> CommandExitError', async () => {
    await rejectsWith(cmd.run('echo partial; exit 3'), sdk.CommandExitError, (e) => {
      assert.equal(e.exitCode, 3)
      assert.equal(e.stdout, 'partial\n')
    })
  })
  await step('cwd, envs, default user and home', async () => {
    assert.equal((await cmd.run('pwd')).stdout, '/home/user\n')
    assert.equal((await cmd.run('pwd', { cwd: '/tmp' })).stdout, '/tmp\n')
    assert.equal((await cmd.run('echo "$FOO-$HOME"', { envs: { FOO: 'bar' } })).stdout, 'bar-/home/user\n')
    assert.equal((await cmd.run('id -un')).stdout, 'user\n')
    assert.equal((await cmd.run('id -un', { user: 'root' })).stdout, 'root\n')
  })
  await step('large output arrives complete', async () => {
    const r = await cmd.run('i=0; while [ $i -lt 20000 ]; do echo line-$i; i=$((i+1)); done')
    const lines = r.stdout.trimEnd().split('\n')
    assert.equal(lines.length, 20000)
    assert.equal(lines[19999], 'line-19999')
  })
  await step('background run, list, kill', async () => {
    const h = await cmd.run('sleep 600', { background: true })
    assert.ok(h.pid > 0)
    const procs = await cmd.list()
    const p = procs.find((x) => x.pid === h.pid)
    assert.ok(p, 'background process listed')
    assert.ok(p.cmd.length > 0 && Array.isArray(p.args))
    assert.equal(await cmd.kill(h.pid), true)
    await rejectsWith(h.wait(), sdk.CommandExitError, (e) => assert.equal(e.exitCode, -1))
    assert.equal(await cmd.kill(h.pid), false)
    assert.equal(await cmd.kill(999999), false)
  })
  await step('stdin: sendStdin and closeStdin', async () => {
    // closeStdin() exists from 2.1x on; older SDKs end the input with the command itself.
    const h = await cmd.run(cmd.closeStdin ? 'cat' : 'head -n 1', { background: true, stdin: true })
    await cmd.sendStdin(h.pid, 'hello ')
    await cmd.sendStdin(h.pid, 'stdin\n')
    if (cmd.closeStdin) await cmd.closeStdin(h.pid)
    const r = await h.wait()
    assert.equal(r.stdout, 'hello stdin\n')
  })
  await step('connect to a running command and get its later output', async () => {
    const h = await cmd.run('sleep 2; echo late; sleep 1; echo done', { background: true })
    await h.disconnect()
    const seen = []
    const c = await cmd.connect(h.pid, { onStdout: (d) => seen.push(d) })
    const r = await c.wait()
    assert.equal(r.exitCode, 0)
    assert.match(seen.join(''), /late\ndone\n$/)
  })
  await step('a disconnected command keeps running', async () => {
    const h = await cmd.run('sleep 1; echo x > /tmp/still-ran', { background: true })
    await h.disconnect()
    await eventually(async () => (await cmd.run('cat /tmp/still-ran 2>/dev/null || true')).stdout === 'x\n',
      'the detached command to finish')
  })
  await step('timeoutMs kills a long foreground command', async () => {
    await rejectsWith(cmd.run('sleep 30', { timeoutMs: 1500 }), sdk.TimeoutError ?? sdk.SandboxError)
  })
  await step('getHost(port): a server in the sandbox answers through spaced', async () => {
    await sbx.files.write('/tmp/www/index.html', 'served from the sandbox\n')
    await cmd.run('httpd -f -p 8080 -h /tmp/www', { background: true })
    const host = sbx.getHost(8080)
    assert.equal(host, `8080-${sbx.sandboxId}.localhost`)
    const r = await eventually(async () => {
      const x = await getVia(host, '/index.html')
      return x.status === 200 ? x : null
    }, 'the guest HTTP server')
    assert.equal(r.body, 'served from the sandbox\n')
    const none = await getVia(sbx.getHost(8089), '/')
    assert.equal(none.status, 502)
  })
  await step('PTY: create, input, resize, kill', async () => {
    const chunks = []
    const dec = new TextDecoder()
    const pty = await sbx.pty.create({ cols: 80, rows: 24, onData: (d) => chunks.push(dec.decode(d)) })
    await sbx.pty.sendInput(pty.pid, new TextEncoder().encode('stty size; echo pty-$((6*7))\n'))
    await eventually(async () => chunks.join('').includes('pty-42'), 'PTY output')
    assert.match(chunks.join(''), /24 80/)
    await sbx.pty.resize(pty.pid, { cols: 100, rows: 30 })
    await sbx.pty.sendInput(pty.pid, new TextEncoder().encode('stty size\n'))
    await eventually(async () => /30 100/.test(chunks.join('')), 'resized PTY')
    assert.equal(await sbx.pty.kill(pty.pid), true)
    await sleep(100)
  })
})
