// E2B volumes mounted into sandboxes (SDK 2.51: Sandbox.create({volumeMounts})): the
// create field maps onto native mounts, so a file written with Volume#writeFile is read
// in the sandbox and the sandbox's writes are read back with Volume#readFile; a mounted
// volume cannot be destroyed; getInfo() and list() show the mounts; a mount of a missing volume fails the create. Needs VMs.
import { assert, sdk, Sandbox, step, main, killLater, rejectsWith, runId } from './lib.mjs'

const { Volume, VolumeError } = sdk
const name = `mnt-${runId}`
let vol, sbx

await main(async () => {
  await step('a volume with a file', async () => {
    vol = await Volume.create(name)
    await vol.writeFile('/hello.txt', 'from the volume api\n')
  })
  await step('create with volumeMounts: the sandbox reads the file', async () => {
    sbx = killLater(await Sandbox.create('base', { timeoutMs: 300_000, volumeMounts: { '/mnt/v': vol, '/data': name } }))
    // piped through cat: docs/security.md "Volumes", residual (busybox cat sendfile)
    const r = await sbx.commands.run('cat /mnt/v/hello.txt | cat; cat /data/hello.txt | cat')
    assert.equal(r.stdout, 'from the volume api\nfrom the volume api\n')
  })
  await step('getInfo and list show the mounts', async () => {
    const want = [{ name, path: '/mnt/v' }, { name, path: '/data' }]
    const byPath = (a) => [...a].sort((x, y) => x.path.localeCompare(y.path))
    assert.deepEqual(byPath((await sbx.getInfo()).volumeMounts), byPath(want))
    const listed = (await Sandbox.list().nextItems()).find((x) => x.sandboxId === sbx.sandboxId)
    assert.deepEqual(byPath(listed.volumeMounts), byPath(want))
  })
  await step('the sandbox writes, Volume#readFile reads it', async () => {
    await sbx.commands.run('echo from-sandbox > /mnt/v/out.txt && mkdir -p /mnt/v/d && echo x > /mnt/v/d/y && sync')
    assert.equal(await vol.readFile('/out.txt'), 'from-sandbox\n')
    assert.deepEqual((await vol.list('/d')).map((e) => e.name), ['y'])
  })
  await step('a mounted volume cannot be destroyed', async () => {
    await rejectsWith(Volume.destroy(name), VolumeError, (e) => assert.match(e.message, /mounted by sandbox/))
  })
  await step('a mount of a missing volume fails the create', async () => {
    await rejectsWith(Sandbox.create('base', { timeoutMs: 60_000, volumeMounts: { '/x': `${name}-none` } }), sdk.SandboxError ?? Error)
  })
  await step('after the sandbox, the data is there and the volume can go', async () => {
    await sbx.kill()
    assert.equal(await vol.readFile('/d/y'), 'x\n')
    assert.equal(await Volume.destroy(name), true)
  })
})
