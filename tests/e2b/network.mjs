// E2B create's network options (allowOut, denyOut) through spaced's gateway, as seen
// from inside the sandbox. Run by test_e2b_sdk.py against a spaced whose gateway sits in
// the network lab of tests/netsec (a fake internet in namespaces: allowed.test, api.test
// and evil.test are web servers there), never the real one.
import { assert, sdk, Sandbox, step, main, killLater, rejectsWith } from './lib.mjs'

// The exit code of `cmd` and its output (a failing command is an answer here, not an error).
async function sh(sbx, cmd) {
  const r = await sbx.commands.run(`${cmd} 2>&1; echo " rc=$?"`, { timeoutMs: 120000 })
  const m = r.stdout.match(/ rc=(\d+)\s*$/)
  return { code: Number(m ? m[1] : -1), out: r.stdout }
}
// `timeout`, not wget's -T: the guest's busybox wget dies of SIGSEGV with -T
const get = (sbx, name) => sh(sbx, `timeout 10 wget -q -O - http://${name}/hello`)

await main(async () => {
  let a, b
  await step('denyOut 0.0.0.0/0 + allowOut: only the allowed name', async () => {
    a = killLater(await Sandbox.create('base', {
      network: { denyOut: ['0.0.0.0/0'], allowOut: ['allowed.test'] }, timeoutMs: 3600000 }))
    const ok = await get(a, 'allowed.test')
    assert.equal(ok.code, 0, ok.out)
    assert.match(ok.out, /"host": "allowed.test"/)
    const dns = await sh(a, 'nslookup api.test')
    assert.notEqual(dns.code, 0, dns.out)
    assert.doesNotMatch(dns.out, /203\.0\.113/)
    const no = await get(a, 'api.test')
    assert.notEqual(no.code, 0, no.out)
  })
  await step('updateNetwork replaces the policy live', async () => {
    await a.updateNetwork({ denyOut: ['evil.test'] })
    const ok = await get(a, 'allowed.test')
    assert.equal(ok.code, 0, ok.out)
    const dns = await sh(a, 'nslookup api.test')
    assert.equal(dns.code, 0, dns.out)
    const no = await get(a, 'evil.test')
    assert.notEqual(no.code, 0, no.out)
    await rejectsWith(a.updateNetwork({ denyOut: ['bad name'] }), sdk.SandboxError,
      (e) => assert.match(e.message, /network\.denyOut\[0\]/))
  })
  await a.kill()
  await step('denyOut of a name: the rest stays reachable', async () => {
    b = killLater(await Sandbox.create('base', {
      network: { denyOut: ['evil.test'], allowOut: [] }, timeoutMs: 3600000 }))
    const ok = await get(b, 'allowed.test')
    assert.equal(ok.code, 0, ok.out)
    assert.match(ok.out, /"host": "allowed.test"/)
    const dns = await sh(b, 'nslookup evil.test')
    assert.notEqual(dns.code, 0, dns.out)
    assert.doesNotMatch(dns.out, /203\.0\.113/)
    const no = await get(b, 'evil.test')
    assert.notEqual(no.code, 0, no.out)
  })
  await b.kill()
  await step('egressProxy and bad entries are refused, not ignored', async () => {
    await rejectsWith(Sandbox.create('base', { network: { egressProxy: { address: 'proxy.test:1080' } } }),
      sdk.SandboxError, (e) => assert.match(e.message, /egressProxy/))
    await rejectsWith(Sandbox.create('base', { network: { denyOut: ['bad name'] } }),
      sdk.SandboxError, (e) => assert.match(e.message, /network\.denyOut\[0\]/))
  })
})
