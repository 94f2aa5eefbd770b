"""Config files `farm up` writes for its servers, from paths it does not control (pure)."""

from __future__ import annotations

from pathlib import Path

from farm.adapters.weedsec import JWT_SECRETS, security_toml
from farm.control.local import redis_quoted


def test_a_redis_path_is_one_quoted_argument_whatever_it_holds() -> None:
    assert redis_quoted("/data/it's a dir") == '"/data/it\'s a dir"'
    quoted = redis_quoted('/d/"x"\\\nrequirepass ""')
    assert "\n" not in quoted and quoted.count('"') == 2
    assert quoted == '"/d/\\x22x\\x22\\x5c\\x0arequirepass \\x22\\x22"'
    assert redis_quoted("/d/é") == '"/d/\\xc3\\xa9"'


def test_security_toml_locks_every_port_but_s3_and_quotes_paths() -> None:
    keys = {name: f"key-{name}" for name in JWT_SECRETS}
    text = security_toml(Path('/data/it\'s "x"/tls'), keys)
    assert 'cert = "/data/it\'s \\"x\\"/tls/node.crt"' in text
    for section in ("[jwt.signing]", "[jwt.signing.read]", "[jwt.filer_signing]",
                    "[jwt.filer_signing.read]", "[grpc.master]", "[grpc.volume]",
                    "[grpc.filer]", "[https.master]", "[https.volume]", "[https.filer]"):  # fmt: skip
        assert section in text
    assert 'key = "key-weed_jwt_read"' in text
