// The unmodified @e2b/code-interpreter SDK against the code-interpreter-v1 template: its
// Sandbox (default template code-interpreter-v1) reaches the server on port 49999 in the
// sandbox through spaced's host routing (E2b-Sandbox-Id / E2b-Sandbox-Port headers) and
// runs cells: streamed stdout/stderr, results with their formats (text, html, png),
// errors, state kept between cells, contexts, bash, per-run env vars, and a client
// timeout that interrupts the cell and leaves the kernel usable.
// Run as `node code_interpreter.mjs @e2b/code-interpreter`.
import { assert, sdk, Sandbox, step, main, killLater, eventually, rejectsWith, raw, apiKey } from './lib.mjs'

const { NotFoundError, SandboxError, TimeoutError } = sdk
const PNG_MAGIC = '89504e470d0a1a0a'
const ANSI = /\x1b\[[0-9;]*m/g

await main(async () => {
  assert.equal(Sandbox.defaultTemplate, 'code-interpreter-v1')
  // A new or restarted Python context starts a kernel: tens of seconds under TCG, past
  // the SDK's 60 s request timeout on a busy machine. Contexts come before pandas and
  // matplotlib are imported: at the 256 MiB an E2B create gets, two kernels with them
  // loaded do not fit (docs/e2b.md, "Code interpreter").
  const sbx = killLater(await Sandbox.create({ timeoutMs: 900_000, requestTimeoutMs: 600_000 }))

  await step('the interpreter answers (a cold-booted sandbox may still be starting its kernel)', async () => {
    const ex = await eventually(() => sbx.runCode('1 + 1').catch(() => null), 'the first execution', 300_000)
    assert.equal(ex.text, '2')
  })

  await step('stdout and stderr stream to the callbacks and the logs', async () => {
    const seen = []
    const ex = await sbx.runCode('import sys\nprint("hello")\nprint("oops", file=sys.stderr)', {
      onStdout: (m) => seen.push(['out', m.line]),
      onStderr: (m) => seen.push(['err', m.line]),
    })
    assert.equal(ex.logs.stdout.join(''), 'hello\n')
    assert.equal(ex.logs.stderr.join(''), 'oops\n')
    assert.deepEqual(seen, [['out', 'hello\n'], ['err', 'oops\n']])
    assert.equal(ex.error, undefined)
    assert.equal(ex.results.length, 0)
  })

  await step('the last expression is the main result, with its text and execution count', async () => {
    const ex = await sbx.runCode('x = 41\nx + 1')
    assert.equal(ex.results.length, 1)
    assert.equal(ex.results[0].isMainResult, true)
    assert.equal(ex.results[0].text, '42')
    assert.equal(ex.text, '42')
    assert.ok(Number.isInteger(ex.executionCount) && ex.executionCount > 1, `executionCount ${ex.executionCount}`)
    const s = await sbx.runCode('"a string"')
    assert.equal(s.text, 'a string', 'quotes of a string repr are dropped, as E2B does')
  })

  await step('state is kept between cells', async () => {
    await sbx.runCode('def twice(v):\n    return 2 * v')
    assert.equal((await sbx.runCode('twice(x)')).text, '82')
  })

  await step('contexts: create with cwd, separate state, list, restart, remove', async () => {
    const ctx = await sbx.createCodeContext({ cwd: '/tmp' })
    assert.equal(ctx.language, 'python')
    assert.equal(ctx.cwd, '/tmp')
    assert.equal((await sbx.runCode('import os\nos.getcwd()', { context: ctx })).text, '/tmp')
    assert.equal((await sbx.runCode('x', { context: ctx })).error.name, 'NameError', 'x lives in the default context only')
    await sbx.runCode('y = 7', { context: ctx })
    assert.equal((await sbx.runCode('y * 6', { context: ctx })).text, '42')
    const listed = await sbx.listCodeContexts()
    assert.ok(listed.some((c) => c.id === ctx.id && c.cwd === '/tmp' && c.language === 'python'), JSON.stringify(listed))
    await sbx.restartCodeContext(ctx)
    assert.equal((await sbx.runCode('y', { context: ctx })).error.name, 'NameError', 'a restart drops the state')
    assert.equal((await sbx.runCode('import os\nos.getcwd()', { context: ctx })).text, '/tmp', 'and keeps the cwd')
    await sbx.removeCodeContext(ctx.id)
    assert.ok(!(await sbx.listCodeContexts()).some((c) => c.id === ctx.id))
    await rejectsWith(sbx.runCode('1', { context: ctx }), NotFoundError)
    await rejectsWith(sbx.removeCodeContext(ctx.id), NotFoundError)
    assert.equal((await sbx.runCode('x')).text, '41', 'the default context is untouched')
  })

  await step('a pandas DataFrame comes back with text and html', async () => {
    const ex = await sbx.runCode('import pandas as pd\npd.DataFrame({"a": [1, 2], "b": [3, 4]})')
    const r = ex.results[0]
    assert.equal(r.isMainResult, true)
    assert.match(r.html, /<table[\s\S]*<th>a<\/th>[\s\S]*<td>4<\/td>/)
    assert.match(r.text, /a\s+b/)
    assert.ok(r.formats().includes('html'))
  })

  await step('a matplotlib figure comes back as a PNG display result', async () => {
    const results = []
    const ex = await sbx.runCode(
      'import matplotlib.pyplot as plt\nplt.plot([1, 2, 3], [1, 4, 9])\nplt.title("squares")\nplt.show()',
      { onResult: (r) => results.push(r) })
    const figs = ex.results.filter((r) => r.png)
    assert.equal(figs.length, 1, JSON.stringify(ex.results.map((r) => r.formats())))
    assert.equal(figs[0].isMainResult, false)
    const png = Buffer.from(figs[0].png, 'base64')
    assert.equal(png.subarray(0, 8).toString('hex'), PNG_MAGIC)
    assert.ok(png.length > 5000, `a ${png.length}-byte PNG`)
    assert.match(figs[0].text, /Figure/)
    assert.equal(results.length, ex.results.length, 'onResult saw every result')
  })

  await step('an exception is an error with name, value and traceback; the cell stops there', async () => {
    const errors = []
    const ex = await sbx.runCode('print("before")\n1 / 0\nprint("after")', { onError: (e) => errors.push(e) })
    assert.equal(ex.error.name, 'ZeroDivisionError')
    assert.equal(ex.error.value, 'division by zero')
    assert.match(ex.error.traceback, /ZeroDivisionError/)
    assert.match(ex.error.traceback.replace(ANSI, ''), /----> 2 1 \/ 0/, 'the traceback points at the line (IPython colours it)')
    assert.equal(ex.logs.stdout.join(''), 'before\n')
    assert.equal(errors.length, 1)
    const nameErr = await sbx.runCode('undefined_name')
    assert.equal(nameErr.error.name, 'NameError')
  })

  await step('bash: stateful shell, exit status as the error, a bash context with its cwd', async () => {
    const a = await sbx.runCode('echo hi from bash; GREETING=hello; cd /tmp', { language: 'bash' })
    assert.equal(a.logs.stdout.join(''), 'hi from bash\n')
    assert.equal(a.error, undefined)
    const b = await sbx.runCode('echo "$GREETING in $(pwd)"; echo to-stderr >&2', { language: 'bash' })
    assert.equal(b.logs.stdout.join(''), 'hello in /tmp\n')
    assert.equal(b.logs.stderr.join(''), 'to-stderr\n')
    const c = await sbx.runCode('ls /no/such/dir', { language: 'bash' })
    assert.equal(c.error.name, 'ExitCode')
    assert.equal(c.error.value, '2')
    assert.match(c.logs.stderr.join(''), /No such file/)
    const ctx = await sbx.createCodeContext({ language: 'bash', cwd: '/home/user' })
    assert.equal(ctx.language, 'bash')
    assert.equal((await sbx.runCode('pwd; whoami', { context: ctx })).logs.stdout.join(''), '/home/user\nuser\n')
    await sbx.removeCodeContext(ctx)
  })

  await step('env vars apply to one execution only (python and bash)', async () => {
    const envs = { SPACE_CI_VAR: "it's a value" }
    const py = 'import os\nstr(os.environ.get("SPACE_CI_VAR"))'
    assert.equal((await sbx.runCode(py, { envs })).text, "it's a value")
    assert.equal((await sbx.runCode(py)).text, 'None')
    const sh = 'echo "[${SPACE_CI_VAR-unset}]"'
    assert.equal((await sbx.runCode(sh, { language: 'bash', envs })).logs.stdout.join(''), "[it's a value]\n")
    assert.equal((await sbx.runCode(sh, { language: 'bash' })).logs.stdout.join(''), '[unset]\n')
  })

  await step('a timeout interrupts the running cell; the kernel then answers at once, state intact', async () => {
    await rejectsWith(sbx.runCode('import time\nfor i in range(600):\n    time.sleep(1)\nleft = "no"', { timeoutMs: 4000 }),
      TimeoutError)
    const t0 = Date.now()
    const ex = await sbx.runCode('x', { timeoutMs: 120_000 })
    assert.equal(ex.text, '41')
    assert.ok(Date.now() - t0 < 90_000, `the next cell waited ${Date.now() - t0} ms`)
    assert.equal((await sbx.runCode('"left" in globals()')).text, 'False', 'the loop did not run to its end')
    // The same for a bash cell: its shell lives on with its variables.
    await rejectsWith(sbx.runCode('sleep 600; echo late', { language: 'bash', timeoutMs: 4000 }), TimeoutError)
    assert.equal((await sbx.runCode('echo "$GREETING"', { language: 'bash' })).logs.stdout.join(''), 'hello\n')
  })

  await step('a sandbox restored from the template\'s snapshot runs code at once (the kernel was up before it)', async () => {
    await eventually(async () => {
      const r = await raw('/v1/templates/code-interpreter-v1', { method: 'GET', headers: { 'X-API-Key': apiKey } })
      // A snapshot that failed is built again only after a backoff (30 s, doubling): say so at once.
      const failed = r.status === 200 && r.json.template.versions.find((v) => v.current && v.state === 'failed')
      assert.ok(!failed, `the template's snapshot failed: ${JSON.stringify(failed)} (spaced's log says why)`)
      return r.status === 200 && r.json.template.versions.some((v) => v.current && v.state === 'ready')
    }, 'the template\'s snapshot', 900_000)
    const t0 = Date.now()
    const restored = killLater(await Sandbox.create({ timeoutMs: 300_000 }))
    assert.equal((await restored.runCode('21 * 2')).text, '42')
    console.log(`restored: create + first runCode in ${Date.now() - t0} ms`)
    await restored.kill()
  })

  await step('bad requests are refused with the reason', async () => {
    await rejectsWith(sbx.runCode('1', { language: 'cobol' }), SandboxError, (e) => assert.match(e.message, /400/))
    await rejectsWith(sbx.createCodeContext({ cwd: '/no/such/dir' }), SandboxError, (e) => assert.match(e.message, /400/))
  })
})
