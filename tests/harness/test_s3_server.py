"""The suite's S3-compatible server answers like S3: objects round-trip, listings and errors are real."""

from __future__ import annotations

import pytest

from tests.testenv.s3 import S3Server


def test_objects_round_trip_through_s3fs(s3_server: S3Server) -> None:
    url = s3_server.bucket("roundtrip")
    fs = s3_server.filesystem()
    payload = bytes(range(256)) * 40_000  # 10 MB: s3fs switches to a multipart upload
    with fs.open(f"{url}/a/blob.bin", "wb", block_size=5 * 2**20) as out:
        out.write(payload)
    assert fs.cat(f"{url}/a/blob.bin") == payload
    assert fs.ls(f"{url}/a", detail=False) == [f"{url[5:]}/a/blob.bin"]


def test_a_missing_bucket_is_an_error(s3_server: S3Server) -> None:
    fs = s3_server.filesystem()
    with pytest.raises(FileNotFoundError):
        fs.cat("s3://no-such-bucket-kubetrain/x")
