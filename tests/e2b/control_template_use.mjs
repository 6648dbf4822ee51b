// A sandbox from a template built with E2B's builder through a control daemon
// (control_template_build.mjs), created through the control: it sees the files the build
// wrote; a snapshot of it deleted through the control (E2B's deleteSnapshot goes to the
// node holding it). Run by tests/e2e/test_cluster_e2b_build.py; SPACE_TEST_TEMPLATE names the template.
import { assert, Sandbox, step, main, killLater } from './lib.mjs'

const name = process.env.SPACE_TEST_TEMPLATE

await main(async () => {
  let sbx
  await step('Sandbox.create(template) through the control; a command sees what the build wrote', async () => {
    const s = killLater(await Sandbox.create(name, { timeoutMs: 300_000 }))
    const r = await s.commands.run('cat /etc/ctl-marker /opt/data/a.txt')
    assert.equal(r.stdout, 'built-through-42\ncopied-through-control\n')
    console.log('sandboxID=' + s.sandboxId)
    sbx = s
  })
  await step('deleteSnapshot (DELETE /templates/{id}) through the control reaches the snapshot\'s node', async () => {
    const snap = await sbx.createSnapshot()
    assert.equal(await Sandbox.deleteSnapshot(snap.snapshotId), true)
    assert.equal(await Sandbox.deleteSnapshot(snap.snapshotId), false)
  })
})
