// E2B's template builder through the SDK (2.51: Template(), fromTemplate, fromBaseImage,
// runCmd, setEnvs, setWorkdir, setUser, setStartCmd, setReadyCmd, copy, Template.build
// with onBuildLogs, Template.getBuildStatus) mapped onto space's builds; a sandbox from
// the result; what does not map (Docker images, registries, glob copies) refused naming why.
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { assert, sdk, Sandbox, step, main, killLater, rejectsWith, runId, raw, apiKey } from './lib.mjs'

const { Template } = sdk

await main(async () => {
  const name = `e2btpl-${runId}`.toLowerCase()
  let built
  const logs = []
  await step('Template.build: fromTemplate, runCmd, setEnvs, setWorkdir, setUser, start/ready', async () => {
    const t = Template()
      .fromTemplate('base')
      .setEnvs({ GREETING: 'hello from e2b' })
      .runCmd('echo built-by-e2b > /etc/e2b-marker && echo build-output-line')
      .runCmd('mkdir -p /srv/app && chown user /srv/app')
      .runCmd('id -un > /srv/app/ran-as', { user: 'user' })
      .setWorkdir('/srv/app')
      .setUser('user')
      .runCmd('pwd > where; id -un >> where')
      .setStartCmd('sleep 100000', 'true')
    built = await Template.build(t, name, { cpuCount: 1, memoryMB: 256, onBuildLogs: (e) => logs.push(e.message) })
    assert.equal(built.templateId, name)
    assert.ok(logs.some((m) => m.includes('build-output-line')), 'the run output reaches onBuildLogs: ' + logs.join(' | '))
    assert.ok(logs.some((m) => m.startsWith('step 2/')), 'stages reach onBuildLogs: ' + logs.join(' | '))
    const st = await Template.getBuildStatus(built)
    assert.equal(st.status, 'ready')
  })
  await step('a sandbox from it has the steps and defaults', async () => {
    const s = killLater(await Sandbox.create(name, { timeoutMs: 300_000 }))
    // (E2B's commands start in the user's home, as on E2B; the workdir is the build's.)
    const r = await s.commands.run('cat /etc/e2b-marker /srv/app/ran-as /srv/app/where; echo "$GREETING"; id -un')
    assert.equal(r.stdout, 'built-by-e2b\nuser\n/srv/app\nuser\nhello from e2b\nuser\n')
  })
  await step('copy(): files uploaded, unpacked in the build VM with user and mode; a sandbox sees them', async () => {
    const ctx = fs.mkdtempSync(path.join(os.tmpdir(), 'e2bcopy-'))
    fs.mkdirSync(path.join(ctx, 'files', 'sub'), { recursive: true })
    fs.writeFileSync(path.join(ctx, 'files', 'a.txt'), 'alpha\n')
    fs.writeFileSync(path.join(ctx, 'files', 'sub', 'b.txt'), 'beta\n')
    const t = Template({ fileContextPath: ctx })
      .fromTemplate('base')
      .copy('files', '/opt/data/', { user: 'user', mode: 0o750 })
      .copy('files/sub/b.txt', '/etc/b-copy.txt')
      .runCmd('cat /opt/data/a.txt /opt/data/sub/b.txt /etc/b-copy.txt')
    const clogs = []
    await Template.build(t, `${name}-cp`, { onBuildLogs: (e) => clogs.push(e.message) })
    fs.rmSync(ctx, { recursive: true, force: true })
    assert.ok(clogs.some((m) => m.includes('Uploaded')), 'the SDK uploaded the files: ' + clogs.join(' | '))
    assert.ok(clogs.some((m) => m.includes('alpha')) && clogs.some((m) => m.includes('beta')),
      'runCmd in the build sees the copied files: ' + clogs.join(' | '))
    const s = killLater(await Sandbox.create(`${name}-cp`, { timeoutMs: 300_000 }))
    const r = await s.commands.run('cat /opt/data/a.txt /opt/data/sub/b.txt /etc/b-copy.txt; ' +
      'stat -c "%U %a" /opt/data/a.txt /opt/data/sub/b.txt /etc/b-copy.txt')
    assert.equal(r.stdout, 'alpha\nbeta\nbeta\nuser 750\nuser 750\nroot 644\n')
  })
  await step('copy() upload links: one tenant and hash, bounded in size and number; bad hash, token or size and unknown hashes refused', async () => {
    const auth = { 'X-API-Key': apiKey, 'Content-Type': 'application/json' }
    const h = 'ab'.repeat(32)
    assert.equal((await raw(`/templates/${name}/files/not-a-hash`, { method: 'GET', headers: auth })).status, 400)
    let r = await raw(`/templates/${name}/files/${h}`, { method: 'GET', headers: auth })
    assert.equal(r.status, 200, r.text)
    assert.equal(r.json.present, false)
    const url = r.json.url
    const forged = [url.replace(`/files/${h}`, `/files/${'cd'.repeat(32)}`), url.replace(/token=[^&]+/, 'token=99999999999999.00'),
      url.replace(/tenant=[^&]+/, 'tenant=someone-else'), url.replace(/[?].*/, '')]
    for (const bad of forged) assert.equal((await fetch(bad, { method: 'PUT', body: 'x' })).status, 401, bad)
    const big = await fetch(url, { method: 'PUT', body: Buffer.alloc(8 * 1024 * 1024 + 1) }).then((x) => x.status, (e) => String(e))
    assert.equal(big, 413)
    const req = await raw('/v3/templates', { headers: auth, body: JSON.stringify({ name: `${name}-nohash` }) })
    const b = await raw(`/v2/templates/${name}-nohash/builds/${req.json.buildID}`, { headers: auth,
      body: JSON.stringify({ fromTemplate: 'base', steps: [{ type: 'COPY', args: ['files', '/tmp/', '', ''], filesHash: h }] }) })
    assert.equal(b.status, 400)
    assert.match(b.json.message, /no files were uploaded with hash abab/)
    assert.equal((await fetch(url, { method: 'PUT', body: 'opaque bytes' })).status, 200)
    r = await raw(`/templates/${name}/files/${h}`, { method: 'GET', headers: auth })
    assert.equal(r.json.present, true)
    // A tenant keeps 32 archives: the 33rd stored drops the least recently used.
    const hashes = Array.from({ length: 33 }, (_, i) => (0x10 + i).toString(16).repeat(32))
    for (const x of hashes) {
      const link = await raw(`/templates/${name}/files/${x}`, { method: 'GET', headers: auth })
      assert.equal((await fetch(link.json.url, { method: 'PUT', body: x })).status, 200)
    }
    const present = async (x) => (await raw(`/templates/${name}/files/${x}`, { method: 'GET', headers: auth })).json.present
    assert.equal(await present(hashes[0]), false)
    assert.equal(await present(hashes[32]), true)
  })
  await step('fromBaseImage is base; a failing runCmd fails the build with its output', async () => {
    const t = Template().fromBaseImage().runCmd('echo about-to-fail; exit 3')
    await rejectsWith(Template.build(t, `${name}-bad`), sdk.BuildError, (e) => { assert.match(e.message, /exited with 3/); assert.match(e.message, /about-to-fail/) })
  })
  await step('what does not map is refused, naming why', async () => {
    await rejectsWith(Template.build(Template().fromImage('ubuntu:22.04').runCmd('true'), `${name}-img`),
      sdk.BuildError, (e) => assert.match(e.message, /not Docker images/))
    await rejectsWith(Template.build(Template().fromImage('ubuntu:22.04', { username: 'u', password: 'p' }), `${name}-reg`),
      sdk.BuildError, (e) => assert.match(e.message, /registry/))
    await rejectsWith(Template.build(Template().fromTemplate('base').copy('*.mjs', '/tmp/'), `${name}-glob`),
      sdk.BuildError, (e) => assert.match(e.message, /glob patterns are not supported/))
    await rejectsWith(Template.build(Template().fromTemplate('base').setUser('a b; touch /x'), `${name}-usr`),
      sdk.BuildError, (e) => assert.match(e.message, /the user must be a user name/))
    await rejectsWith(Template.build(Template().fromTemplate('base').runCmd('true', { user: '-x' }), `${name}-rusr`),
      sdk.BuildError, (e) => assert.match(e.message, /the user must be a user name/))
    await rejectsWith(Template.build(Template().fromTemplate('no-such-template'), `${name}-nx`), sdk.BuildError)
  })
})
