// E2B's template builder through a control daemon (run by tests/e2e/test_cluster_e2b_build.py
// against a control with two nodes): Template.build with a copy() (the SDK fetches an upload
// link and PUTs the files to it: the link must name the control, since nodes refuse clients)
// and a runCmd writing a file; the build's status; Template.exists. SPACE_TEST_TEMPLATE
// names the template; the script prints "buildID=<id>" for the test's own checks.
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { assert, sdk, step, main, raw, apiKey, api } from './lib.mjs'

const { Template } = sdk
const name = process.env.SPACE_TEST_TEMPLATE

await main(async () => {
  let built
  await step('Template.build through the control: copy() uploaded via the control, runCmd', async () => {
    const ctx = fs.mkdtempSync(path.join(os.tmpdir(), 'e2bctl-'))
    fs.mkdirSync(path.join(ctx, 'files'))
    fs.writeFileSync(path.join(ctx, 'files', 'a.txt'), 'copied-through-control\n')
    const t = Template({ fileContextPath: ctx })
      .fromTemplate('base')
      .copy('files', '/opt/data/')
      .runCmd('echo built-through-$((40+2)) > /etc/ctl-marker && cat /opt/data/a.txt')
    const logs = []
    built = await Template.build(t, name, { cpuCount: 1, memoryMB: 256, onBuildLogs: (e) => logs.push(e.message) })
    fs.rmSync(ctx, { recursive: true, force: true })
    assert.equal(built.templateId, name)
    assert.ok(logs.some((m) => m.includes('Uploaded')), 'the SDK uploaded the files: ' + logs.join(' | '))
    assert.ok(logs.some((m) => m.includes('copied-through-control')),
      'the build log (the building node\'s) reaches onBuildLogs: ' + logs.join(' | '))
    console.log('buildID=' + built.buildId)
  })
  await step('getBuildStatus and Template.exists through the control', async () => {
    const st = await Template.getBuildStatus(built)
    assert.equal(st.status, 'ready')
    assert.equal(await Template.exists(name), true)
    assert.equal(await Template.aliasExists('base'), true)
    assert.equal(await Template.exists(`${name}-never-built`), false)
  })
  await step('an upload link handed out through the control names the control', async () => {
    const h = 'cd'.repeat(32)
    const r = await raw(`/templates/${name}/files/${h}`, { method: 'GET', headers: { 'X-API-Key': apiKey } })
    assert.equal(r.status, 200, r.text)
    assert.equal(r.json.present, false)
    assert.ok(r.json.url.startsWith(`${api}/templates/${name}/files/${h}?`), r.json.url)
    assert.equal((await fetch(r.json.url.replace(/token=[^&]+/, 'token=1.00'), { method: 'PUT', body: 'x' })).status, 401)
    assert.equal((await fetch(r.json.url, { method: 'PUT', body: 'x' })).status, 200)
    const again = await raw(`/templates/${name}/files/${h}`, { method: 'GET', headers: { 'X-API-Key': apiKey } })
    assert.equal(again.json.present, true)
  })
})
