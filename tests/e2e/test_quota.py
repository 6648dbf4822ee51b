"""Per-tenant quotas (src/daemon/quota, docs/api.md "Quotas") on a fake-guest daemon: no
VM boots, creates are accepted and their sandboxes fail fast, and a failed sandbox still
counts (it keeps a disk until deleted).

Covers: creates beyond a tenant's sandbox / vCPU / memory / disk / template limit are
refused with 403 quota_exceeded naming the resource, the limit and the use, while the
tenant's existing sandboxes keep answering and other tenants are unaffected; deleting
frees quota; GET /v1/quota shows limits and usage; an admin reads and sets a tenant's
quota (partial PUT, null = daemon default, validation, admin only, unknown tenant 404);
a concurrent burst of creates never overshoots; the E2B API answers 429 in E2B's error
shape (what the SDKs raise as RateLimitError), without Retry-After; bad --quota-*
values are refused at start."""
import shutil
import subprocess
import threading

import pytest

from spacedlib import SPACED, Spaced, make_fake_guest


@pytest.fixture(scope="module")
def q():
    guest = make_fake_guest()
    s = Spaced(guest).start(extra=["--quota-sandboxes", "2", "--quota-vcpus", "3",
                                   "--quota-templates", "1"])
    yield s
    s.stop()
    shutil.rmtree(guest, ignore_errors=True)


def key_for(s, tenant):
    r = s.request("POST", "/v1/keys", {"tenant": tenant})
    assert r.status == 201, r
    return r.json["secret"], r.json["key"]["tenant"] if "key" in r.json else r.json["tenant"]


def create(s, key, **extra):
    return s.request("POST", "/v1/sandboxes", dict({"template": "fake"}, **extra), key=key)


def assert_quota_error(r, resource, limit, used):
    assert r.status == 403, r
    err = r.json["error"]
    assert err["code"] == "quota_exceeded", err
    msg = err["message"]
    assert resource in msg and "limit %d" % limit in msg and "in use %d" % used in msg, msg


def test_sandbox_count_limit(q):
    a, _ = key_for(q, "qa")
    b, _ = key_for(q, "qb")
    ids = []
    for _ in range(2):
        r = create(q, a)
        assert r.status == 202, r
        ids.append(r.json["sandbox"]["id"])
        q.wait_op(r.json["operation"]["id"], key=a)
    assert_quota_error(create(q, a), "sandboxes", 2, 2)
    # The tenant's sandboxes still answer; another tenant has its own quota.
    for sid in ids:
        assert q.request("GET", "/v1/sandboxes/" + sid, key=a).status == 200
    r = create(q, b)
    assert r.status == 202, r
    got = q.request("GET", "/v1/quota", key=a)
    assert got.status == 200, got
    assert got.json["limits"]["sandboxes"] == 2 and got.json["usage"]["sandboxes"] == 2, got.json
    assert got.json["limits"]["memory_mib"] == 0 and got.json["limits"]["snapshots"] == 0, got.json
    # Deleting one frees its place.
    r = q.request("DELETE", "/v1/sandboxes/" + ids[0], key=a)
    assert r.status == 202, r
    assert q.wait_op(r.json["operation"]["id"], key=a)["state"] == "succeeded"
    r = create(q, a)
    assert r.status == 202, r


def test_vcpu_memory_disk_limits(q):
    a, tenant = key_for(q, "qc")
    r = create(q, a, vcpus=2)
    assert r.status == 202, r
    assert_quota_error(create(q, a, vcpus=2), "vcpus", 3, 2)
    # An admin sets memory and disk limits for this tenant only.
    r = q.request("PUT", "/v1/tenants/qc/quota", {"memory_mib": 300, "disk_mib": 1})
    assert r.status == 200, r
    assert r.json["limits"]["memory_mib"] == 300 and r.json["limits"]["vcpus"] == 3, r.json
    assert_quota_error(create(q, a, memory_mib=256), "memory_mib", 300, 256)
    r = q.request("PUT", "/v1/tenants/%s/quota" % tenant, {"memory_mib": None})
    assert r.status == 200 and r.json["limits"]["memory_mib"] == 0, r
    # The fake template's image is 4 KiB: one MiB of disk per sandbox.
    assert_quota_error(create(q, a), "disk_mib", 1, 1)


def test_admin_quota_api(q):
    a, tenant = key_for(q, "qd")
    r = q.request("GET", "/v1/tenants/qd/quota")
    assert r.status == 200 and r.json["tenant"] == tenant, r
    assert r.json["limits"] == {"sandboxes": 2, "vcpus": 3, "memory_mib": 0, "disk_mib": 0,
                                "templates": 1, "snapshots": 0, "volume_mib": 0}, r.json
    r = q.request("PUT", "/v1/tenants/qd/quota", {"sandboxes": 5, "snapshots": 4})
    assert r.status == 200, r
    assert r.json["limits"]["sandboxes"] == 5 and r.json["limits"]["snapshots"] == 4, r.json
    assert q.request("GET", "/v1/quota", key=a).json["limits"]["sandboxes"] == 5
    for body in ({"sandboxes": -1}, {"sandboxes": "3"}, {"sandboxes": 1.5}, {"cpus": 1}, [1]):
        r = q.request("PUT", "/v1/tenants/qd/quota", body)
        assert r.status == 400, (body, r)
    assert q.request("GET", "/v1/quota", key=a).json["limits"]["sandboxes"] == 5
    # Tenants cannot read or set quotas, their own included, through the admin routes.
    for method in ("GET", "PUT"):
        r = q.request(method, "/v1/tenants/qd/quota", {"sandboxes": 99} if method == "PUT" else None, key=a)
        assert r.status == 403, r
    r = q.request("GET", "/v1/tenants/nobody-here/quota")
    assert r.status == 404 and r.error_code() == "not_found", r


def test_concurrent_burst_never_overshoots(q):
    a, _ = key_for(q, "qe")
    assert q.request("PUT", "/v1/tenants/qe/quota", {"sandboxes": 3, "vcpus": 0}).status == 200
    statuses = []
    lock = threading.Lock()

    def one():
        r = create(q, a)
        with lock:
            statuses.append(r.status)

    threads = [threading.Thread(target=one) for _ in range(12)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(statuses) == [202] * 3 + [403] * 9, statuses
    listed = q.request("GET", "/v1/sandboxes", key=a).json["sandboxes"]
    assert len(listed) == 3, listed
    assert q.request("GET", "/v1/quota", key=a).json["usage"]["sandboxes"] == 3


def test_template_limit(q):
    a, _ = key_for(q, "qf")
    r = q.request("POST", "/v1/templates", {"name": "qf-one", "base": "fake"}, key=a)
    assert r.status == 202, r
    q.wait_op(r.json["operation"]["id"], key=a)  # fails: the fake guest cannot boot
    r = q.request("POST", "/v1/templates", {"name": "qf-two", "base": "fake"}, key=a)
    assert_quota_error(r, "templates", 1, 1)
    # Rebuilding its own failed template is not a new one.
    r = q.request("POST", "/v1/templates", {"name": "qf-one", "base": "fake"}, key=a)
    assert r.status == 202, r
    q.wait_op(r.json["operation"]["id"], key=a)


def test_e2b_create_over_quota_is_429(q):
    a, _ = key_for(q, "qg")
    assert q.request("PUT", "/v1/tenants/qg/quota", {"sandboxes": 1}).status == 200
    assert create(q, a).status == 202
    r = q.request("POST", "/sandboxes", {"templateID": "fake"}, key=None, headers={"X-API-Key": a})
    assert r.status == 429, r
    assert r.json["code"] == 429 and "quota exceeded: sandboxes" in r.json["message"], r.json
    assert "retry-after" not in r.headers, r.headers


def test_python_client_raises_quota_exceeded(q):
    import os
    import sys
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "clients", "python"))
    import space
    a, _ = key_for(q, "qh")
    assert q.request("PUT", "/v1/tenants/qh/quota", {"sandboxes": 1}).status == 200
    c = space.Client(url=q.url, api_key=a)
    c.create(template="fake", wait=False)
    with pytest.raises(space.SpaceError) as e:
        c.create(template="fake", wait=False)
    assert e.value.status == 403 and e.value.code == "quota_exceeded", e.value
    assert c.quota()["usage"]["sandboxes"] == 1


@pytest.mark.parametrize("arg", ["-1", "x", "", "2000000000000"])
def test_bad_quota_option_refused(arg, tmp_path):
    r = subprocess.run([SPACED, "--data-dir", str(tmp_path), "--quota-sandboxes", arg],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 2 and "quota" in r.stderr, r
