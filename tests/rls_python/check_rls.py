"""Field-level checks of `clusterlimit serve`'s rate limit service (RLS v3) through grpcio and
the stubs of PyPI's xds-protos: an implementation of the protocol independent of ours.

Run by tests/rls_python.rs against a sidecar loaded with tests/rls_python/ratelimit.yaml:

    python check_rls.py 127.0.0.1:PORT

Each case prints one line; the first failed check raises, and the exit status is 1.
"""

import sys
import time
import uuid

import grpc
from envoy.extensions.common.ratelimit.v3 import ratelimit_pb2
from envoy.service.ratelimit.v3 import rls_pb2, rls_pb2_grpc
from google.protobuf import wrappers_pb2

OK = rls_pb2.RateLimitResponse.OK
OVER_LIMIT = rls_pb2.RateLimitResponse.OVER_LIMIT
DAY = rls_pb2.RateLimitResponse.RateLimit.DAY
HOUR = rls_pb2.RateLimitResponse.RateLimit.HOUR
TIMEOUT_S = 10


def fresh(name):
    """A value no other case or run uses (memory:// lives as long as the sidecar)."""
    return f"{name}-{uuid.uuid4().hex[:8]}"


def descriptor(*entries, hits_addend=None):
    d = ratelimit_pb2.RateLimitDescriptor(
        entries=[ratelimit_pb2.RateLimitDescriptor.Entry(key=k, value=v) for k, v in entries]
    )
    if hits_addend is not None:
        d.hits_addend.CopyFrom(wrappers_pb2.UInt64Value(value=hits_addend))
    return d


class Rls:
    def __init__(self, address):
        self.channel = grpc.insecure_channel(address)
        self.stub = rls_pb2_grpc.RateLimitServiceStub(self.channel)

    def ask(self, *descriptors, domain="py", hits_addend=0):
        request = rls_pb2.RateLimitRequest(
            domain=domain, descriptors=list(descriptors), hits_addend=hits_addend
        )
        return self.stub.ShouldRateLimit(request, timeout=TIMEOUT_S)


def expect(cond, what, response=None):
    if not cond:
        raise AssertionError(f"{what}\nresponse: {response}")


def seconds_to_utc_midnight():
    return 86400 - int(time.time()) % 86400


def day_window_guard():
    """The `unit: day` cases count within one fixed window: never start one that ends soon."""
    left = seconds_to_utc_midnight()
    if left < 60:
        print(f"waiting {left + 1} s for the next UTC day's window", flush=True)
        time.sleep(left + 1)


def case_per_key_counts(rls):
    user = fresh("u")
    for remaining in (2, 1, 0):
        r = rls.ask(descriptor(("user", user)))
        expect(r.overall_code == OK, f"request with {remaining} left is OK", r)
        s = r.statuses[0]
        expect(s.code == OK and s.limit_remaining == remaining, f"remaining {remaining}", r)
        expect(s.current_limit.requests_per_unit == 3, "current_limit 3 per unit", r)
        expect(s.current_limit.unit == DAY, "unit DAY", r)
        expect(s.current_limit.name == "per-user", "limit name", r)
        reset = s.duration_until_reset.seconds
        expect(0 < reset <= seconds_to_utc_midnight() + 1, "reset at the end of the UTC day", r)
    r = rls.ask(descriptor(("user", user)))
    expect(r.overall_code == OVER_LIMIT, "4th request OVER_LIMIT", r)
    expect(r.statuses[0].code == OVER_LIMIT and r.statuses[0].limit_remaining == 0, "status", r)
    other = rls.ask(descriptor(("user", fresh("u"))))
    expect(other.overall_code == OK and other.statuses[0].limit_remaining == 2, "another user counts apart", other)


def case_value_beats_key(rls):
    r = rls.ask(descriptor(("user", "vip")))
    expect(r.statuses[0].current_limit.requests_per_unit == 100, "key_value rule wins", r)
    expect(r.statuses[0].current_limit.name == "vip", "its name", r)


def case_hits_addend(rls):
    user = fresh("h")
    r = rls.ask(descriptor(("user", user)), hits_addend=2)
    expect(r.statuses[0].limit_remaining == 1, "request hits_addend 2 counts 2", r)
    r = rls.ask(descriptor(("user", user), hits_addend=1), hits_addend=5)
    expect(r.overall_code == OK and r.statuses[0].limit_remaining == 0, "descriptor hits_addend wins", r)
    r = rls.ask(descriptor(("user", user)), hits_addend=0)
    expect(r.overall_code == OVER_LIMIT, "hits_addend 0 counts as 1", r)
    r = rls.ask(descriptor(("user", fresh("h"))), hits_addend=10)
    expect(r.overall_code == OVER_LIMIT, "a cost above the limit is OVER_LIMIT, not an error", r)


def case_wildcard(rls):
    path = f"/api/{fresh('p')}"
    for remaining in (1, 0):
        r = rls.ask(descriptor(("path", path)))
        s = r.statuses[0]
        expect(s.code == OK and s.limit_remaining == remaining, "prefix match counts", r)
        expect(s.current_limit.name == "api-prefix", "the wildcard rule", r)
    expect(rls.ask(descriptor(("path", path))).overall_code == OVER_LIMIT, "then over", None)
    r = rls.ask(descriptor(("path", "/other")))
    expect(r.overall_code == OK and not r.statuses[0].HasField("current_limit"), "no match: OK, no limit", r)


def case_nested(rls):
    path = fresh("/n")
    r = rls.ask(descriptor(("tenant", "acme"), ("path", path)))
    s = r.statuses[0]
    expect(s.current_limit.name == "acme-path" and s.limit_remaining == 1, "nested rule", r)
    r = rls.ask(descriptor(("tenant", "acme")))
    expect(not r.statuses[0].HasField("current_limit"), "a node without rate_limit: no limit", r)
    r = rls.ask(descriptor(("tenant", "other"), ("path", path)))
    expect(not r.statuses[0].HasField("current_limit"), "another tenant: no limit", r)


def case_unlimited(rls):
    for _ in range(5):
        r = rls.ask(descriptor(("internal", "x")), hits_addend=1000)
        expect(r.overall_code == OK and r.statuses[0].code == OK, "unlimited is always OK", r)
        expect(not r.statuses[0].HasField("current_limit"), "unlimited reports no limit", r)


def case_shadow(rls):
    key = fresh("s")
    rls.ask(descriptor(("shadowed", key)))
    r = rls.ask(descriptor(("shadowed", key)))
    expect(r.overall_code == OK, "a shadow-mode rule over its limit answers OK", r)
    expect(r.statuses[0].code == OK and r.statuses[0].limit_remaining == 0, "status OK, 0 left", r)


def case_replaces(rls):
    key = fresh("r")
    for _ in range(3):
        r = rls.ask(descriptor(("replaced", key)), descriptor(("replacer", key)))
        expect(r.overall_code == OK, "the replaced limit (1) is not applied", r)
        expect(r.statuses[1].current_limit.name == "big", "the replacing one is", r)
    r = rls.ask(descriptor(("replaced", key)))
    expect(r.overall_code == OK, "alone, the small limit applies afresh (it counted nothing)", r)


def case_one_over_denies_all(rls):
    user, path = fresh("m"), f"/api/{fresh('m')}"
    rls.ask(descriptor(("path", path)), hits_addend=2)
    r = rls.ask(descriptor(("user", user)), descriptor(("path", path)))
    expect(r.overall_code == OVER_LIMIT, "overall OVER_LIMIT when one descriptor is", r)
    expect(r.statuses[0].code == OK and r.statuses[1].code == OVER_LIMIT, "per-descriptor codes", r)
    r = rls.ask(descriptor(("user", user)))
    expect(r.statuses[0].limit_remaining == 2, "all or nothing: the denied request took nothing", r)


def case_gcra(rls):
    key = fresh("b")
    for remaining in (1, 0):
        r = rls.ask(descriptor(("bucket", key)))
        expect(r.overall_code == OK and r.statuses[0].limit_remaining == remaining, "bucket admits its burst", r)
        expect(r.statuses[0].current_limit.unit == HOUR, "unit HOUR", r)
    r = rls.ask(descriptor(("bucket", key)))
    expect(r.overall_code == OVER_LIMIT, "then denies", r)
    reset = r.statuses[0].duration_until_reset.seconds
    expect(0 < reset <= 3600, "until a token is back (30 min at 2 per hour)", r)


def case_unknown_domain(rls):
    r = rls.ask(descriptor(("user", "x")), descriptor(("a", "b")), domain="nobody")
    expect(r.overall_code == OK and len(r.statuses) == 2, "unknown domain: OK, one status each", r)
    expect(all(s.code == OK and not s.HasField("current_limit") for s in r.statuses), "no limits", r)


def case_bad_requests(rls):
    for what, call in (
        ("empty domain", lambda: rls.ask(descriptor(("user", "x")), domain="")),
        ("no descriptors", lambda: rls.ask()),
    ):
        try:
            r = call()
        except grpc.RpcError as e:
            # envoyproxy's code: its plain Go error goes out as UNKNOWN.
            expect(e.code() == grpc.StatusCode.UNKNOWN, f"{what}: UNKNOWN, got {e.code()}")
            expect(e.details(), f"{what}: a message saying why")
            continue
        raise AssertionError(f"{what}: answered instead of UNKNOWN: {r}")


CASES = [
    case_per_key_counts,
    case_value_beats_key,
    case_hits_addend,
    case_wildcard,
    case_nested,
    case_unlimited,
    case_shadow,
    case_replaces,
    case_one_over_denies_all,
    case_gcra,
    case_unknown_domain,
    case_bad_requests,
]


def main():
    rls = Rls(sys.argv[1])
    grpc.channel_ready_future(rls.channel).result(timeout=TIMEOUT_S)
    day_window_guard()
    for case in CASES:
        case(rls)
        print(f"ok {case.__name__}", flush=True)
    print(f"all {len(CASES)} cases passed")


if __name__ == "__main__":
    main()
