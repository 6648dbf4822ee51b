// E2B's template builder through the SDK (2.51: Template(), fromTemplate, fromBaseImage,
// runCmd, setEnvs, setWorkdir, setUser, setStartCmd, setReadyCmd, Template.build with
// onBuildLogs, Template.getBuildStatus) mapped onto space's builds; a sandbox from the
// result; what does not map (Docker images, registries, copy) refused naming why.
import { assert, sdk, Sandbox, step, main, killLater, rejectsWith, runId } from './lib.mjs'

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
  await step('fromBaseImage is base; a failing runCmd fails the build with its output', async () => {
    const t = Template().fromBaseImage().runCmd('echo about-to-fail; exit 3')
    await rejectsWith(Template.build(t, `${name}-bad`), sdk.BuildError, (e) => { assert.match(e.message, /exited with 3/); assert.match(e.message, /about-to-fail/) })
  })
  await step('what does not map is refused, naming why', async () => {
    await rejectsWith(Template.build(Template().fromImage('ubuntu:22.04').runCmd('true'), `${name}-img`),
      sdk.BuildError, (e) => assert.match(e.message, /not Docker images/))
    await rejectsWith(Template.build(Template().fromImage('ubuntu:22.04', { username: 'u', password: 'p' }), `${name}-reg`),
      sdk.BuildError, (e) => assert.match(e.message, /registry/))
    await rejectsWith(Template.build(Template().fromTemplate('base').copy('template.mjs', '/tmp/'), `${name}-cp`),
      sdk.FileUploadError, (e) => assert.match(e.message, /copy\(\) is not supported/))
    await rejectsWith(Template.build(Template().fromTemplate('no-such-template'), `${name}-nx`), sdk.BuildError)
  })
})
