"""The explorer under faults: stores damaged on disk (missing, garbage, truncated and symlinked
chunk files, a shard index with a hole, malformed ``zarr.json``, missing attributes, a store
removed while serving), hostile requests (bad integers, foreign ``Host``, other methods, half
requests) and load. Each malformed store is built here from a copy of a real tiny-model store;
every answer is checked to be an error as JSON, never a map of zeros, while the good store
keeps serving."""

from __future__ import annotations

import http.client
import io
import json
import logging
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.parse
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest

from attnscope.explorer import StoreReader, server
from attnscope.explorer.errors import StoreError
from tests.conftest import REPO
from tests.helpers import (
    EXPERIMENT,
    MODEL,
    json_error,
    punch_hole,
    reference,
    request,
    serving,
    shard,
    store_path,
)

GOOD = "trained"
NUM_HEADS, NUM_LAYERS = 4, 2  # tiny-mistral's (tests/configs/tiny-models.yaml)


def map_path(variant: str, group: str = "000", level: str = "token", layer: int = 1, head: int = -1) -> str:
    store_id = f"{MODEL}/{variant}/{EXPERIMENT}"
    return f"/api/map?store={store_id}&group={group}&level={level}&layer={layer}&head={head}"


def assert_good_store_serves(address: tuple[str, int], results: Path) -> None:
    status, headers, body = request(address, map_path(GOOD))
    assert status == 200, body
    shape = tuple(int(s) for s in headers["X-Shape"].split(","))
    expected = reference(results, GOOD, "000", "token", 1, -1).astype(np.float32)
    np.testing.assert_array_equal(np.frombuffer(body, dtype="<f4").reshape(shape), expected)


# --- damaged chunk files: the store scans, its reads fail ---


SECRET_UNIT = b"SECRET-BYTES-OF-ANOTHER-FILE"
SECRET = SECRET_UNIT * 64

CHUNK_FAULTS: dict[str, tuple[str, Callable[[Path], None]]] = {
    # name: (the array it damages, the damage to its shard file)
    "missing-shard": ("head_mean", Path.unlink),
    "garbage-shard": ("head_mean", lambda p: p.write_bytes(os.urandom(p.stat().st_size))),
    "truncated-shard": ("head_mean", lambda p: p.write_bytes(p.read_bytes()[: p.stat().st_size // 2])),
    "tiny-shard": ("head_mean", lambda p: p.write_bytes(b"\0" * 8)),
    "hole-in-index": ("head_mean", lambda p: punch_hole(p, 1, NUM_LAYERS)),  # one per layer
    "missing-attn-shard": ("attn", Path.unlink),
    "missing-cosine": ("cosine", Path.unlink),
    "missing-word-map": ("word_attn_sum", Path.unlink),
    "missing-metrics": ("metrics", Path.unlink),
    "missing-array-json": ("head_mean", lambda p: (p.parent / "zarr.json").unlink()),
    "garbage-array-json": ("word_attn_sum", lambda p: (p.parent / "zarr.json").write_text('{"shape": [')),
}
FAULT_REQUESTS = {
    "head_mean": map_path("{v}"),
    "attn": map_path("{v}", head=2),
    "cosine": map_path("{v}", level="cosine", layer=0),
    "word_attn_sum": map_path("{v}", level="word"),
    "metrics": f"/api/metrics?store={MODEL}/{{v}}/{EXPERIMENT}&group=000&head=-1",
}


def assert_no_secret(body: bytes) -> None:
    """No 4 bytes of the other file in a response (the old server echoed a chunk's last 4 bytes)."""
    twice = SECRET_UNIT * 2
    leaked = [twice[i : i + 4] for i in range(len(SECRET_UNIT)) if twice[i : i + 4] in body]
    assert not leaked, leaked


def symlink_to_secret(path: Path) -> None:
    secret = path.parents[4] / "secret.bin"
    secret.write_bytes(SECRET)
    path.unlink()
    path.symlink_to(secret)


CHUNK_FAULTS["symlinked-shard"] = ("head_mean", symlink_to_secret)


@pytest.fixture(scope="module")
def damaged(results, tmp_path_factory) -> Path:
    """A results folder: the good store and one copy of it per chunk fault."""
    root = tmp_path_factory.mktemp("damaged")
    shutil.copytree(store_path(results, GOOD), store_path(root, GOOD))
    for variant, (array, damage) in CHUNK_FAULTS.items():
        shutil.copytree(store_path(results, GOOD), store_path(root, variant))
        damage(shard(root, variant, array))
    return root


@pytest.fixture(scope="module")
def damaged_server(damaged) -> Iterator[tuple[str, int]]:
    with serving(StoreReader(damaged)) as address:
        yield address


@pytest.mark.parametrize("variant", list(CHUNK_FAULTS))
def test_a_damaged_chunk_is_an_error_naming_store_and_array_never_zeros(
    damaged, damaged_server, results, variant
):
    array = CHUNK_FAULTS[variant][0]
    status, headers, body = request(damaged_server, FAULT_REQUESTS[array].format(v=variant))
    error = json_error(status, headers, body)
    assert status == 500, error
    assert f"{MODEL}/{variant}/{EXPERIMENT}" in error and f"000/{array}" in error, error
    assert_no_secret(body)
    assert_good_store_serves(damaged_server, results)


def test_the_reader_raises_without_a_server(damaged):
    """The reader alone (no sockets): a missing shard is a StoreError, not a map of zeros."""
    reader = StoreReader(damaged)
    with pytest.raises(StoreError, match="missing data"):
        reader.map(f"{MODEL}/missing-shard/{EXPERIMENT}", "000", "token", 1, -1)
    with pytest.raises(StoreError, match="never written"):
        reader.map(f"{MODEL}/hole-in-index/{EXPERIMENT}", "000", "token", 0, -1)
    assert reader.map(f"{MODEL}/{GOOD}/{EXPERIMENT}", "000", "token", 1, -1).any()


def test_a_store_removed_while_serving_is_an_error(results, tmp_path):
    shutil.copytree(store_path(results, GOOD), store_path(tmp_path, GOOD))
    shutil.copytree(store_path(results, GOOD), store_path(tmp_path, "doomed"))
    with serving(StoreReader(tmp_path)) as address:
        assert request(address, map_path("doomed", layer=0))[0] == 200  # arrays opened and cached
        shutil.rmtree(store_path(tmp_path, "doomed"))
        for path in (
            map_path("doomed", layer=1),
            map_path("doomed", group="001"),
            map_path("doomed", head=1),
        ):
            error = json_error(*request(address, path))
            assert f"{MODEL}/doomed/{EXPERIMENT}" in error, error
        assert_good_store_serves(address, results)


# --- malformed stores: skipped when scanned, listed, the others serve ---


def edit_metadata(change: Callable[[dict], None]) -> Callable[[Path], None]:
    """A damage that changes a store's root ``zarr.json`` document in place."""

    def edit(path: Path) -> None:
        meta = json.loads((path / "zarr.json").read_text())
        change(meta)
        (path / "zarr.json").write_text(json.dumps(meta))

    return edit


def edit_root(key: str, value: object) -> Callable[[Path], None]:
    return edit_metadata(lambda meta: meta.update({key: value}))


def edit_attrs(change: Callable[[dict], None]) -> Callable[[Path], None]:
    return edit_metadata(lambda meta: change(meta["attributes"]))


def truncate_json(path: Path) -> None:
    text = (path / "zarr.json").read_text()
    (path / "zarr.json").write_text(text[: len(text) // 2])


STORE_FAULTS: dict[str, Callable[[Path], None]] = {
    "attrs-list": edit_root("attributes", [1, 2]),
    "attrs-null": edit_root("attributes", None),
    "attrs-number": edit_root("attributes", 3),
    "unknown-key": edit_root("surprise", {"must_understand": True}),
    "node-type-array": edit_root("node_type", "array"),
    "format-mistyped": edit_root("zarr_format", "three"),
    "truncated-json": truncate_json,
    "no-json": lambda p: (p / "zarr.json").unlink(),
    "no-prompts": edit_attrs(lambda a: a.pop("prompts")),
    "no-num-layers": edit_attrs(lambda a: a.pop("num_layers")),
    "num-heads-text": edit_attrs(lambda a: a.update(num_heads="4")),
    "prompts-dict": edit_attrs(lambda a: a.update(prompts={"group": "000"})),
    "prompt-path": edit_attrs(lambda a: a["prompts"][0].update(group="../../trained/animals-k3.zarr/000")),
    "metrics-null": edit_attrs(lambda a: a.update(metrics=None)),
}


@pytest.fixture(scope="module")
def malformed(results, tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("malformed")
    shutil.copytree(store_path(results, GOOD), store_path(root, GOOD))
    for variant, damage in STORE_FAULTS.items():
        shutil.copytree(store_path(results, GOOD), store_path(root, variant))
        damage(store_path(root, variant))
    return root


def test_malformed_stores_are_listed_unavailable_and_the_others_serve(malformed, results, caplog):
    with caplog.at_level(logging.WARNING, logger="attnscope"):
        reader = StoreReader(malformed)
    assert list(reader.stores) == [f"{MODEL}/{GOOD}/{EXPERIMENT}"]
    reasons = {Path(u["path"]).parent.name: u["reason"] for u in reader.unavailable}
    assert set(reasons) == set(STORE_FAULTS), reasons
    assert "not a readable Zarr group" in reasons["attrs-list"] and "Traceback" not in reasons["attrs-list"]
    assert "'prompts' missing" in reasons["no-prompts"] and "'num_layers' missing" in reasons["no-num-layers"]
    assert "prompts[0]" in reasons["prompt-path"] and "'num_heads' is a str" in reasons["num-heads-text"]
    assert all(variant in caplog.text for variant in STORE_FAULTS)  # logged with the reason
    with serving(reader) as address:
        status, _, body = request(address, "/api/index")
        assert status == 200
        index = json.loads(body)
        assert len(index["unavailable"]) == len(STORE_FAULTS) and len(index["stores"]) == 1
        assert all(any(variant in p for p in index["problems"]) for variant in STORE_FAULTS)
        assert_good_store_serves(address, results)
        status, headers, body = request(address, map_path("attrs-list"))
        assert status == 404 and "no store" in json_error(status, headers, body)


STORE_SECRET = "SECRET-TOKEN-abc"
SECRET_FAULTS: dict[str, Callable[[Path], None]] = {
    # zarr's exception texts quote these ("... Got SECRET-TOKEN-abc.", "unexpected keyword argument ...")
    "format-secret": edit_root("zarr_format", STORE_SECRET),
    "key-secret": edit_root(STORE_SECRET, {"must_understand": False}),
    # check_attrs's reasons once quoted the values
    "version-secret": edit_attrs(lambda a: a.update(store_version=STORE_SECRET)),
    "heads-secret": edit_attrs(lambda a: a.update(num_heads=STORE_SECRET)),
}


def test_a_malformed_root_json_is_never_echoed_in_the_index(results, tmp_path, caplog):
    """A store whose root ``zarr.json`` carries other text is listed unavailable with a reason in
    our words (the file named, the exception's type at most); zarr's message reaches the log only."""
    shutil.copytree(store_path(results, GOOD), store_path(tmp_path, GOOD))
    for variant, damage in SECRET_FAULTS.items():
        shutil.copytree(store_path(results, GOOD), store_path(tmp_path, variant))
        damage(store_path(tmp_path, variant))
    with caplog.at_level(logging.WARNING, logger="attnscope"):
        reader = StoreReader(tmp_path)
    with serving(reader) as address:
        status, _, body = request(address, "/api/index")
    assert status == 200
    pieces = {STORE_SECRET[i : i + 4] for i in range(len(STORE_SECRET) - 3)}
    assert not [piece for piece in pieces if piece.encode() in body], body
    index = json.loads(body)
    assert [store["variant"] for store in index["stores"]] == [GOOD]
    reasons = {Path(u["path"]).parent.name: u["reason"] for u in index["unavailable"]}
    assert set(reasons) == set(SECRET_FAULTS) and all(reasons.values()), reasons
    relative = f"attention/{MODEL}/format-secret/{EXPERIMENT}.zarr/zarr.json"
    assert relative in reasons["format-secret"] and "not valid Zarr v3" in reasons["format-secret"]
    for variant in ("format-secret", "key-secret"):  # zarr's full message, on the terminal once
        logged = [r.getMessage() for r in caplog.records if f"/{variant}/" in r.getMessage()]
        assert len(logged) == 1 and STORE_SECRET in logged[0], logged


# --- hostile requests ---


@pytest.fixture(scope="module")
def good_server(results) -> Iterator[tuple[str, int]]:
    with serving(StoreReader(results)) as address:
        yield address


BAD_INTEGERS = [
    ("head", str(NUM_HEADS), f"valid: 0..{NUM_HEADS - 1}, or -1 for the head mean"),
    ("head", "-11", "valid: 0..3"),
    ("head", str(10**30), "valid: 0..3"),
    ("head", "1_0", "not an integer"),
    ("head", "%202%20", "not an integer"),
    ("head", "%D9%A2", "not an integer"),  # Arabic-Indic two
    ("head", "", "not an integer"),
    ("layer", str(NUM_LAYERS), f"valid: 0..{NUM_LAYERS - 1}"),
    ("layer", "-1", f"valid: 0..{NUM_LAYERS - 1}"),
    ("layer", "0x1", "not an integer"),
]


@pytest.mark.parametrize(
    ("endpoint", "name", "value", "message"),
    [("map", *bad) for bad in BAD_INTEGERS] + [("metrics", *bad) for bad in BAD_INTEGERS if bad[0] == "head"],
)
def test_bad_integers_are_400_naming_the_parameter_and_its_range(good_server, endpoint, name, value, message):
    params = {"store": f"{MODEL}/{GOOD}/{EXPERIMENT}", "group": "000", "level": "token", "layer": "1"}
    params[name] = value
    path = f"/api/{endpoint}?" + "&".join(f"{k}={v}" for k, v in params.items())
    status, headers, body = request(good_server, path)
    error = json_error(status, headers, body)
    assert status == 400 and f"{name}=" in error and message in error, error


def test_missing_parameters_and_pages_are_json_errors(good_server):
    for path, status, message in [
        (f"/api/map?store={MODEL}/{GOOD}/{EXPERIMENT}&group=000&level=token", 400, "'layer'"),
        ("/api/prompt?group=000", 400, "'store'"),
        ("/api/nothing", 404, "no such page"),
        (map_path(GOOD, level="pixels"), 400, "level='pixels'"),
    ]:
        answer = request(good_server, path)
        assert answer[0] == status and message in json_error(*answer), answer


def raw_answer(address: tuple[str, int], data: bytes) -> tuple[bytes, bytes]:
    """(status line and headers, body) of the server's answer to raw bytes."""
    with socket.create_connection(address, timeout=30) as raw:
        raw.sendall(data)
        answer = b""
        while chunk := raw.recv(65536):
            answer += chunk
    if answer.startswith(b"HTTP/"):
        head, _, body = answer.partition(b"\r\n\r\n")
        return head, body
    return b"", answer  # an HTTP/0.9 answer: the body alone


def test_the_standard_librarys_own_errors_are_json(good_server):
    head, body = raw_answer(good_server, b"GARBAGE\r\n\r\n")
    assert "Bad request" in json.loads(body)["error"]
    headers = b"".join(b"X-%d: 1\r\n" % i for i in range(150))
    head, body = raw_answer(good_server, b"GET / HTTP/1.1\r\nHost: localhost\r\n" + headers + b"\r\n")
    assert head.startswith(b"HTTP/1.1 431") and b"Content-Type: application/json" in head, head
    assert "Too many headers" in json.loads(body)["error"]


def test_a_foreign_host_header_is_refused(good_server, results):
    for host in ("evil.example", "evil.example:80", "127.0.0.1.evil.example"):
        status, headers, body = request(good_server, "/api/index", headers={"Host": host})
        assert status == 421 and "not served" in json_error(status, headers, body)
        assert str(results).encode() not in body
    for host in (f"127.0.0.1:{good_server[1]}", f"localhost:{good_server[1]}", "LOCALHOST"):
        assert request(good_server, "/api/index", headers={"Host": host})[0] == 200, host


class FakeConnection:
    """A client connection without a socket: the request's bytes in, the answer's bytes kept."""

    def __init__(self, data: bytes):
        self.data, self.sent = data, bytearray()

    def settimeout(self, timeout: float | None) -> None:
        pass

    def makefile(self, mode: str, buffering: int = -1) -> io.BytesIO:
        return io.BytesIO(self.data)

    def sendall(self, data: bytes) -> None:
        self.sent += data


class IndexOnly:
    """A reader with an empty index: enough for the Host check."""

    def index(self) -> dict:
        return {"stores": []}


@pytest.mark.parametrize(
    ("bind", "host", "status"),
    [
        ("0.0.0.0", "192.168.1.5:8000", 200),  # every interface: any IP address names this server
        ("0.0.0.0", "192.168.1.5", 200),
        ("0.0.0.0", "[fe80::1]:8000", 200),
        ("0.0.0.0", "localhost:8000", 200),
        ("0.0.0.0", "evil.example:8000", 421),  # a host name: DNS rebinding
        ("0.0.0.0", "192.168.1.5.evil.example", 421),
        ("::", "192.168.1.5:8000", 200),
        ("::", "[fe80::1]:8000", 200),
        ("::", "evil.example", 421),
        ("127.0.0.1", "192.168.1.5", 421),  # loopback: loopback names only
        ("127.0.0.1", "[fe80::1]:8000", 421),
        ("127.0.0.1", "localhost:8000", 200),
        ("192.168.1.5", "192.168.1.5:8000", 200),  # one address: that address
        ("192.168.1.5", "192.168.1.6:8000", 421),
    ],
)
def test_the_host_check_of_the_bind_address(bind, host, status):
    handler = server.make_handler(IndexOnly(), bind)
    connection = FakeConnection(f"GET /api/index HTTP/1.1\r\nHost: {host}\r\n\r\n".encode())
    handler(connection, ("192.168.1.7", 50000), None)
    head, _, body = bytes(connection.sent).partition(b"\r\n\r\n")
    assert head.startswith(f"HTTP/1.1 {status} ".encode()), head
    assert b"Content-Type: application/json" in head
    answer = json.loads(body)
    assert ("not served" in answer["error"]) if status == 421 else answer == {"stores": []}


def test_head_is_served_and_nothing_changes_state(good_server):
    status, headers, body = request(good_server, map_path(GOOD), method="HEAD")
    assert status == 200 and body == b"" and int(headers["Content-Length"]) > 0
    stats = json.loads(request(good_server, "/api/stats")[2])
    assert stats["chunk"] > 0
    assert json.loads(request(good_server, "/api/stats?reset=1")[2])["chunk"] >= stats["chunk"]  # no reset
    for method in ("POST", "PUT", "DELETE"):
        answer = request(good_server, "/api/stats", method=method)
        assert answer[0] == 405 and answer[1]["Allow"] == "GET, HEAD" and "read-only" in json_error(*answer)


def test_connections_are_kept_alive(good_server):
    connection = http.client.HTTPConnection(*good_server, timeout=30)
    try:
        sockets = []
        for path in ("/api/index", map_path(GOOD), "/api/nothing", map_path(GOOD, layer=0)):
            connection.request("GET", path)
            connection.getresponse().read()
            sockets.append(connection.sock)
        assert all(s is sockets[0] and s is not None for s in sockets)
    finally:
        connection.close()


def test_half_a_request_is_dropped_after_the_timeout(results, monkeypatch):
    monkeypatch.setattr(server, "CONNECTION_TIMEOUT_S", 1, raising=False)  # (a server without one hangs)
    with serving(StoreReader(results)) as address, socket.create_connection(address, timeout=30) as raw:
        raw.sendall(b"GET /api/index HTTP/1.1\r\nHost: 127")  # never finished
        started = time.perf_counter()
        assert raw.recv(1024) == b""  # closed by the server
        assert time.perf_counter() - started < 10


def test_ipv6_loopback(results):
    try:
        with socket.socket(socket.AF_INET6) as probe:
            probe.bind(("::1", 0))
    except OSError as err:
        pytest.skip(f"no IPv6 loopback on this machine ({err})")
    with serving(StoreReader(results), "::1") as address:
        status, _, body = request(address, "/api/index", headers={"Host": f"[::1]:{address[1]}"})
    assert status == 200 and json.loads(body)["stores"]


def test_a_store_id_with_url_characters_is_served_when_encoded(results, tmp_path):
    variant = "a&b #1+"
    shutil.copytree(store_path(results, GOOD), store_path(tmp_path, variant))
    with serving(StoreReader(tmp_path)) as address:
        query = urllib.parse.urlencode({"store": f"{MODEL}/{variant}/{EXPERIMENT}", "group": "000"})
        status, _, body = request(address, f"/api/prompt?{query}")
    assert status == 200 and json.loads(body)["target"] == "Ant"


def test_app_js_encodes_every_url_parameter():
    """The page builds its API URLs with URLSearchParams, never by pasting values into a string."""
    app = (Path(server.__file__).parent / "static" / "app.js").read_text()
    assert "?store=${" not in app and "&group=${" not in app
    with_parameters = app.count('"/api/') - app.count('"/api/index"')  # the index takes none
    assert app.count('apiURL("/api/') == with_parameters >= 4  # prompt, map, metrics, head


# --- the command: one line on a taken port, a warning off loopback ---


def explore(results: Path, *args: str) -> subprocess.Popen:
    command = [sys.executable, "-m", "attnscope.explorer", "explore", str(results), *args]
    return subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=os.environ
    )


def test_a_taken_port_is_one_line_without_a_traceback(results):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        process = explore(results, "--port", str(taken.getsockname()[1]))
        stdout, stderr = process.communicate(timeout=60)
    assert process.returncode == 2 and stdout == ""
    assert "Traceback" not in stderr and stderr.count("\n") == 1, stderr
    assert "cannot listen on 127.0.0.1 port" in stderr and "--port" in stderr


def test_a_non_loopback_address_is_warned_about(results):
    process = explore(results, "--host", "0.0.0.0", "--port", "0")
    try:
        url_line = process.stdout.readline()
    finally:
        process.terminate()
    stderr = process.communicate(timeout=30)[1]
    assert "open http://0.0.0.0:" in url_line
    assert "serves the results to the network, without authentication" in stderr


# --- the handler without stores ---


class FailingReader:
    """A reader whose every read is a bug: the handler must still answer JSON and log it once."""

    def index(self) -> dict:
        raise RuntimeError("a bug in the reader")

    map = prompt = metrics = stats = difference = index


def test_a_bug_is_a_500_json_error_logged_once(caplog):
    with caplog.at_level(logging.ERROR, logger="attnscope"), serving(FailingReader()) as address:
        status, headers, body = request(address, "/api/index")
    assert status == 500 and "internal error" in json_error(status, headers, body)
    assert b"a bug in the reader" not in body
    assert caplog.text.count("Traceback") == 1 and "a bug in the reader" in caplog.text


# --- load ---


def k8_shaped_store(root: Path) -> tuple[str, int, int]:
    """A store of the default run's k = 8 store's shape (SmolLM2: 30 layers × 9 heads, 330 tokens;
    two prompts, the first with its heads), written by the explorer benchmark's own writer:
    (store id, layers, heads)."""
    sys.path.insert(0, str(REPO / "benchmarks"))
    try:
        from bench_explorer import write_synthetic
    finally:
        sys.path.remove(str(REPO / "benchmarks"))
    path = write_synthetic(root, num_layers=30, num_heads=9, n=330, prompts=2)
    return "/".join(path.relative_to(root / "attention").with_suffix("").parts), 30, 9


@pytest.mark.parametrize("shape", ["tiny", "k8-shaped"])
def test_load_100_requests_at_20_clients_p95_under_200_ms(results, tmp_path, shape):
    """The server as a user starts it (its own process), 20 clients each opening a connection per
    request: the listen backlog must hold the burst (a backlog of 5 dropped SYNs: 1 s retries);
    on the tests' tiny store and on one of the default run's k = 8 store's size, whose maps are
    what a user switches between. The bar holds for the best of three bursts: the clients share
    the machine's cores with the server, so one burst's tail also measures whatever else the
    machine ran then; a server that drops connections or serves slowly misses it in every burst."""
    if shape == "tiny":  # prompts 000 and 002 keep their heads
        root, store_id, layers, heads = results, f"{MODEL}/{GOOD}/{EXPERIMENT}", NUM_LAYERS, NUM_HEADS
        groups = {"000": True, "002": True}
    else:  # only prompt 000 keeps its heads
        root = tmp_path
        store_id, layers, heads = k8_shaped_store(root)
        groups = {"000": True, "001": False}
    process = explore(root, "--port", "0")
    try:
        base = process.stdout.readline().rsplit(" ", 1)[-1].strip().rstrip("/")
        address = ("127.0.0.1", int(base.rsplit(":", 1)[1]))
        paths = [
            f"/api/map?store={store_id}&group={g}&level=token&layer={i % layers}"
            f"&head={i % heads if groups[g] else -1}"
            for i, g in enumerate(list(groups) * 50)
        ]
        for path in paths[:8]:
            assert request(address, path)[0] == 200  # arrays opened

        def timed(path: str) -> float:
            started = time.perf_counter()
            status, _, _ = request(address, path)
            assert status == 200
            return time.perf_counter() - started

        bursts = []
        for _ in range(3):
            with ThreadPoolExecutor(20) as pool:
                bursts.append(list(pool.map(timed, paths)))
    finally:
        process.terminate()
        process.communicate(timeout=30)
    assert [len(seconds) for seconds in bursts] == [100] * 3
    p95 = [np.percentile(seconds, 95) for seconds in bursts]
    assert min(p95) < 0.2, p95
