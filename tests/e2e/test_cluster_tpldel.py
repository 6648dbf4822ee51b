"""Deleting a built template while sandboxes or builds are being made from it
(docs/multinode.md, "Templates that travel between nodes", Deletion): PostgreSQL, two
control replicas and two nodes on one machine (test_cluster's world).

The invariant, whatever the interleaving: either the delete answered 200 and then no
sandbox row (in any state but deleted) names the template and no build from it was
accepted (the losing create or build got `409 template_deleted`, booting nothing), or
the delete answered `409 template_in_use` and the template is still ready (the create or
build went on, on an image that is still there).

The template is built on node X; X is then drained, so creates and builds through the
first control land on node Y, while deletes through the second control go to X (the
template's holder). The interleavings are forced through the store, with no hook in
spaced: the test holds a row lock in a PostgreSQL transaction of its own, waits (in
pg_stat_activity) until a daemon's statement waits for it, sends the other request, and
then lets go:

- create_stalls: the tenant's quota row (every create's submit transaction locks it,
  store_quota_lock, after the create has read the template as ready); the delete comes
  while Y's create waits there.
- delete_stalls: the template's own row (FOR UPDATE); the create comes while X's delete
  waits to write it.
- build_stalls: the quota row again, for a build FROM the template.
- create_holds: the sandboxes table (LOCK TABLE ... IN SHARE MODE: reads go on, inserts
  wait); Y's create has checked the template and waits to insert its row when the delete
  reaches X. This one the create wins (409 template_in_use; its sandbox then runs).

Before deletes were atomic (the holder counted users, then marked the row deleted, in
separate steps) each case ended with the delete answered 200 and the create or build
accepted: a sandbox row of a deleted template (whose image the holder had removed), or a
build of a deleted base. One build VM and one sandbox VM (TCG); the templates of the
later cases are copies of the built one, made as a build leaves them (files on X, a
ready row naming X)."""
import concurrent.futures
import os
import shutil
import subprocess
import time

from test_cluster import cluster, sql, wait_live  # noqa: F401 (fixture)
from test_cluster_templates import build, drain
from test_store_pg import pg_server, pg_url  # noqa: F401 (fixtures)

NAME = "tpldel"
SPEC = {"name": NAME, "base": "base", "steps": [{"run": "echo deleted-race > /etc/tpldel"}]}
BODY = {"timeout": 0, "network": {"mode": "none"}}


class RowLock:
    """A transaction of the test's own on the database, holding the row locks `stmt`
    takes until release()."""

    def __init__(self, url, stmt):
        self.p = subprocess.Popen(["psql", "-X", "-At", "-v", "ON_ERROR_STOP=1", "-d", url],
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                  text=True)
        self.p.stdin.write("BEGIN;\n%s;\n\\echo locked\n" % stmt)
        self.p.stdin.flush()
        while True:
            line = self.p.stdout.readline()
            assert line, "psql failed: %s" % self.p.stderr.read()
            if line.strip() == "locked":
                return

    def release(self):
        if self.p.poll() is None:
            self.p.stdin.write("COMMIT;\n")
            self.p.stdin.close()
            assert self.p.wait(timeout=30) == 0, self.p.stderr.read()


def waiters(url, table):
    """Statements of other sessions waiting for a lock while touching `table`."""
    return int(sql(url, "SELECT count(*) FROM pg_stat_activity WHERE datname=current_database()"
                        " AND wait_event_type='Lock' AND pid<>pg_backend_pid()"
                        " AND query LIKE '%%%s%%'" % table)[0])


def wait_for(cond, timeout, what):
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, what
        time.sleep(0.05)


def copy_template(pg_url, x, src, name):  # noqa: F811
    """Template `name` as a build of `src`'s bytes on X leaves it: its directory on X
    (image hard-linked, template.json copied) and a ready row naming X."""
    d, s = (os.path.join(x.data_dir, "templates", n) for n in (name, src))
    os.mkdir(d)
    os.link(os.path.join(s, "rootfs.ext4"), os.path.join(d, "rootfs.ext4"))
    shutil.copy(os.path.join(s, "template.json"), os.path.join(d, "template.json"))
    sql(pg_url, "INSERT INTO templates(name,tenant,state,spec,failure,dir,created_ms,updated_ms,nodes,digest,"
                "size_bytes,meta) SELECT '%s',tenant,state,spec,failure,'%s',created_ms,updated_ms,nodes,digest,"
                "size_bytes,meta FROM templates WHERE name='%s'" % (name, d, src))


def race(pool, pg_url, lock_stmt, first, first_table, second, second_table):  # noqa: F811
    """Holds lock_stmt's locks; sends first() and waits until a statement of it waits on
    first_table; sends second() and waits until it answered or a statement waits on
    second_table too; lets go. Returns both responses."""
    lock = RowLock(pg_url, lock_stmt)
    try:
        f1 = pool.submit(first)
        wait_for(lambda: waiters(pg_url, first_table) >= 1 or f1.done(), 60, "the first request never waited")
        assert not f1.done(), f1.result()
        f2 = pool.submit(second)
        want = 2 if second_table == first_table else 1
        deadline = time.monotonic() + 10
        while not f2.done() and waiters(pg_url, second_table) < want and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        lock.release()
    return f1.result(timeout=120), f2.result(timeout=120)


def template_state(pg_url, name):  # noqa: F811
    return sql(pg_url, "SELECT state FROM templates WHERE name='%s'" % name)[0]


def users(pg_url, name):  # noqa: F811
    return sql(pg_url, "SELECT id||'|'||state||'|'||node FROM sandboxes WHERE template='%s' AND state<>'deleted'"
               % name)


def check_delete_vs_create(control, pg_url, x, name, deleted, created):  # noqa: F811
    """The invariant for a delete and a create of template `name`: None, or what broke
    it. The winner's sandbox, if any, is deleted afterwards."""
    print("%s: delete %r, create %r" % (name, deleted, created))
    if deleted.status == 200:
        assert template_state(pg_url, name) == "deleted"
        assert not os.path.exists(os.path.join(x.data_dir, "templates", name))
        if users(pg_url, name) or created.status != 409:
            return "%s: the delete answered 200, the create %r; sandbox(es) of the template: %s" % (
                name, created, users(pg_url, name))
        assert created.error_code() == "template_deleted", created
        assert name in created.json["error"]["message"], created
        return None
    assert deleted.status == 409 and deleted.error_code() == "template_in_use", deleted
    assert template_state(pg_url, name) == "ready"
    assert created.status == 202, created
    sid = created.json["sandbox"]["id"]
    assert [u.split("|")[0] for u in users(pg_url, name)] == [sid]
    op = control.wait_op(created.json["operation"]["id"], timeout=600)
    assert op["state"] == "succeeded", op  # on an image that is still there
    r = control.request("DELETE", "/v1/sandboxes/" + sid)
    assert r.status == 202 and control.wait_op(r.json["operation"]["id"], timeout=300)["state"] == "succeeded"
    return None


def check_delete_vs_build(control, pg_url, name, child, deleted, built):  # noqa: F811
    """The same for a delete of template `name` and a build of `child` from it."""
    print("%s: delete %r, build %r" % (name, deleted, built))
    if deleted.status == 200:
        if built.status != 409:
            return "%s: the delete answered 200, the build from it %r" % (name, built)
        assert built.error_code() == "template_deleted", built
        assert sql(pg_url, "SELECT count(*) FROM templates WHERE name='%s'" % child) == ["0"]
        return None
    assert deleted.status == 409 and deleted.error_code() == "template_in_use", deleted
    assert built.status == 202, built
    assert control.wait_op(built.json["operation"]["id"], timeout=900)["state"] == "succeeded"
    return None


def test_template_delete_never_races_a_create(cluster, pg_url):  # noqa: F811
    control, nodes, _, second_control = cluster
    control.pg_url = pg_url  # for build()
    wait_live(control)
    c2 = second_control()
    x, y = nodes
    drain(control, y.node_id, True)
    build(control, SPEC, x.node_id)
    drain(control, y.node_id, False)
    drain(control, x.node_id, True)  # creates and builds through a control go to Y now
    copy_template(pg_url, x, NAME, NAME + "-b")
    copy_template(pg_url, x, NAME, NAME + "-c")
    copy_template(pg_url, x, NAME, NAME + "-d")

    def create(name):
        return lambda: control.request("POST", "/v1/sandboxes", dict(BODY, template=name))

    def delete(name):
        return lambda: c2.request("DELETE", "/v1/templates/" + name)

    quota_row = ("INSERT INTO tenant_quotas(tenant,max_sandboxes,max_vcpus,max_memory_mib,max_disk_mib,"
                 "max_templates,max_snapshots,updated_ms) VALUES('admin',-1,-1,-1,-1,-1,-1,0)"
                 " ON CONFLICT(tenant) DO UPDATE SET updated_ms=tenant_quotas.updated_ms")
    broken = []
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        # create_stalls: Y's create read the template as ready and waits in its submit
        # transaction; the delete reaches X meanwhile.
        created, deleted = race(pool, pg_url, quota_row, create(NAME), "tenant_quotas", delete(NAME), "templates")
        broken.append(check_delete_vs_create(control, pg_url, x, NAME, deleted, created))

        # delete_stalls: X's delete waits for the template's row; a create reaches Y.
        name = NAME + "-b"
        deleted, created = race(pool, pg_url, "SELECT name FROM templates WHERE name='%s' FOR UPDATE" % name,
                                delete(name), "templates", create(name), "templates")
        broken.append(check_delete_vs_create(control, pg_url, x, name, deleted, created))

        # build_stalls: a build FROM the template placed on Y waits in its submit
        # transaction; the delete reaches X meanwhile.
        name = NAME + "-c"
        built, deleted = race(pool, pg_url, quota_row,
                              lambda: control.request("POST", "/v1/templates", {
                                  "name": NAME + "-child", "base": name, "steps": [{"run": "true"}]}),
                              "tenant_quotas", delete(name), "templates")
        broken.append(check_delete_vs_build(control, pg_url, name, NAME + "-child", deleted, built))

        # create_holds: Y's create waits to insert its sandbox row; the delete reaches X.
        name = NAME + "-d"
        created, deleted = race(pool, pg_url, "LOCK TABLE sandboxes IN SHARE MODE", create(name), "sandboxes",
                                delete(name), "templates")
        broken.append(check_delete_vs_create(control, pg_url, x, name, deleted, created))
    broken = [b for b in broken if b]
    assert not broken, "\n".join(broken)

    # No daemon died, and with nothing using it the template goes.
    for n in nodes + [control, c2]:
        assert n.proc.poll() is None, n.log()
    r = control.request("DELETE", "/v1/templates/" + NAME)
    assert r.status in (200, 404), r  # 404: the first case's delete won
