"""Class "Host games on port 80": every request on a connection is parsed; its Host
(and absolute-form target) must be the name the connection was opened for; CONNECT,
h2c and ambiguous framing get 403/400 and the connection closes. Raw requests are
written from inside the VM."""

ALLOWED_IP = "203.0.113.10"


def http(sb, text, ip=ALLOWED_IP):
    return sb.py("http", ip, "80", text)


def requests_seen(lab, mark):
    return [e for e in lab.since(mark) if e["kind"] == "http"]


def test_host_other_than_resolved_name(lab, sb):
    mark = lab.mark()
    r = http(sb, "GET / HTTP/1.1\\r\\nHost: evil.test\\r\\n\\r\\n")
    assert r["reply"].startswith("HTTP/1.1 403") and r["closed"]
    assert not requests_seen(lab, mark)


def test_second_keepalive_request_other_host(lab, sb):
    mark = lab.mark()
    r = http(sb, "GET /one HTTP/1.1\\r\\nHost: allowed.test\\r\\n\\r\\n"
                 "GET /two HTTP/1.1\\r\\nHost: blocked.test\\r\\n\\r\\n")
    assert "HTTP/1.1 403" in r["reply"] and r["closed"]
    # Both heads arrive in one segment: /one is forwarded only if the gateway dialled
    # upstream before it parsed /two. Either way /two must never reach a server.
    seen = requests_seen(lab, mark)
    assert [e["path"] for e in seen] in (["/one"], []), seen
    assert all(e["host"] == "allowed.test" for e in seen), seen


def test_keepalive_same_host_allowed(lab, sb):
    mark = lab.mark()
    r = http(sb, "GET /a HTTP/1.1\\r\\nHost: allowed.test\\r\\n\\r\\n"
                 "POST /b HTTP/1.1\\r\\nHost: allowed.test:80\\r\\nContent-Length: 5\\r\\n\\r\\nhello"
                 "GET /c HTTP/1.1\\r\\nHost: ALLOWED.test\\r\\nConnection: close\\r\\n\\r\\n")
    assert r["reply"].count("HTTP/1.1 200") == 3, r
    assert [e["path"] for e in requests_seen(lab, mark)] == ["/a", "/b", "/c"]


def test_chunked_body_then_smuggled_host(lab, sb):
    mark = lab.mark()
    r = http(sb, "POST /a HTTP/1.1\\r\\nHost: allowed.test\\r\\nTransfer-Encoding: chunked\\r\\n\\r\\n"
                 "5\\r\\nhello\\r\\n0\\r\\n\\r\\n"
                 "GET /b HTTP/1.1\\r\\nHost: blocked.test\\r\\n\\r\\n")
    assert "HTTP/1.1 403" in r["reply"]
    # /a is forwarded only if the gateway dialled upstream before it parsed the smuggled
    # head (both arrive in one segment): either way /b must never reach a server.
    assert [e["path"] for e in requests_seen(lab, mark)] in (["/a"], []), requests_seen(lab, mark)


def test_absolute_uri_to_other_host(lab, sb):
    mark = lab.mark()
    targets = ("http://blocked.test/", "http://evil.test/x", "https://allowed.test/",
               "http://allowed.test@evil.test/", "http://allowed.test:8080/")
    res = sb.batch([("http", ALLOWED_IP, "80", "GET %s HTTP/1.1\\r\\nHost: allowed.test\\r\\n\\r\\n" % t)
                    for t in targets])
    for target, r in zip(targets, res):
        assert r["reply"].startswith("HTTP/1.1 40"), (target, r)
    assert not requests_seen(lab, mark)


def test_absolute_uri_same_host_allowed(lab, sb):
    r = http(sb, "GET http://allowed.test/abs HTTP/1.1\\r\\nHost: allowed.test\\r\\nConnection: close\\r\\n\\r\\n")
    assert r["reply"].startswith("HTTP/1.1 200")


def test_connect_refused(lab, sb):
    mark = lab.mark()
    r = http(sb, "CONNECT evil.test:443 HTTP/1.1\\r\\nHost: evil.test:443\\r\\n\\r\\n")
    assert r["reply"].startswith("HTTP/1.1 403") and r["closed"]
    r = http(sb, "GET / HTTP/1.1\\r\\nHost: allowed.test\\r\\n\\r\\n"
                 "CONNECT allowed.test:443 HTTP/1.1\\r\\nHost: allowed.test\\r\\n\\r\\n")
    assert "HTTP/1.1 403" in r["reply"]
    assert len(requests_seen(lab, mark)) == 1


def test_h2c_upgrade_and_prior_knowledge_refused(lab, sb):
    mark = lab.mark()
    r = http(sb, "GET / HTTP/1.1\\r\\nHost: allowed.test\\r\\nConnection: Upgrade, HTTP2-Settings\\r\\n"
                 "Upgrade: h2c\\r\\nHTTP2-Settings: AAMAAABkAARAAAAAAAIAAAAA\\r\\n\\r\\n")
    assert r["reply"].startswith("HTTP/1.1 403") and r["closed"]
    r = http(sb, "PRI * HTTP/2.0\\r\\n\\r\\nSM\\r\\n\\r\\n")
    assert r["reply"].startswith("HTTP/1.1 403")
    # A prior-knowledge client sends the preface and its SETTINGS frame in one write.
    preface = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + bytes.fromhex("000000040000000000")
    r = sb.py("tcp", ALLOWED_IP, "80", preface.hex(), "3")
    assert r["reply"] == "" or r["reply"].startswith("HTTP/1.1 403"), r
    assert not requests_seen(lab, mark)


def test_ambiguous_framing_refused(lab, sb):
    mark = lab.mark()
    cases = [
        "POST / HTTP/1.1\\r\\nHost: allowed.test\\r\\nContent-Length: 4\\r\\nTransfer-Encoding: chunked\\r\\n\\r\\n",
        "POST / HTTP/1.1\\r\\nHost: allowed.test\\r\\nContent-Length: 4\\r\\nContent-Length: 5\\r\\n\\r\\n",
        "GET / HTTP/1.1\\r\\nHost: allowed.test\\r\\nHost: evil.test\\r\\n\\r\\n",
        "GET / HTTP/1.1\\r\\nHost: allowed.test\\r\\n X-Folded: evil\\r\\n\\r\\n",
        "GET / HTTP/1.1\\nHost: allowed.test\\n\\n",
        "GET / HTTP/1.1\\r\\nHost : allowed.test\\r\\n\\r\\n",
        "POST / HTTP/1.1\\r\\nHost: allowed.test\\r\\nTransfer-Encoding: gzip, chunked\\r\\n\\r\\n",
        "GET / HTTP/1.0\\r\\n\\r\\n",
        "GET / HTTP/1.1\\r\\nHost: 203.0.113.10\\r\\n\\r\\n",
    ]
    for c, r in zip(cases, sb.batch([("http", ALLOWED_IP, "80", c) for c in cases])):
        assert r["reply"].startswith("HTTP/1.1 40") or r["reply"] == "", (c, r)
    assert not requests_seen(lab, mark)


def test_oversized_head(lab, sb):
    r = http(sb, "GET / HTTP/1.1\\r\\nHost: allowed.test\\r\\nX: " + "a" * 20000 + "\\r\\n\\r\\n")
    assert r["reply"].startswith("HTTP/1.1 431")
    assert lab.gateway_alive()
