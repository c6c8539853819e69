"""The cloud storage clients a job checkpoints through, by their own exception texts: a status the
store returns keeps its meaning whichever client printed it (throttled or unavailable: a retry
passes; forbidden or missing: it does not), and no credentials at all is the job's environment."""

from __future__ import annotations

import pytest

from tests.diagnose.logs import verdict


@pytest.mark.parametrize(
    ("line", "restartable"),
    [
        (
            "google.api_core.exceptions.TooManyRequests: 429 PUT https://storage.googleapis.com/upload/storage/v1/b/"
            "ckpt/o?uploadType=resumable: The object ckpt/latest exceeded the rate limits for object mutation.",
            True,
        ),
        (
            "google.api_core.exceptions.RetryError: Timeout of 120.0s exceeded, last exception: 503 Service Unavailable",
            True,
        ),
        (
            "google.api_core.exceptions.Forbidden: 403 GET https://storage.googleapis.com/storage/v1/b/ckpt/o/x: "
            "trainer@proj.iam.gserviceaccount.com does not have storage.objects.get access",
            False,
        ),
    ],
)
def test_a_google_storage_status_reads_as_the_same_status_from_s3(tmp_path, line, restartable):
    rule, category, got_restartable, isolate = verdict(tmp_path, [line])
    assert (rule, category, got_restartable, isolate) == (
        "infra.google_api_error",
        "infrastructure",
        restartable,
        [],
    )


@pytest.mark.parametrize(
    "line",
    [
        "botocore.exceptions.NoCredentialsError: Unable to locate credentials",
        "google.auth.exceptions.DefaultCredentialsError: Your default credentials were not found. To set up "
        "Application Default Credentials, see https://cloud.google.com/docs/authentication/external/set-up-adc",
        "azure.identity._exceptions.ClientAuthenticationError: DefaultAzureCredential failed to retrieve a token from "
        "the included credentials.",
    ],
)
def test_a_job_without_cloud_credentials_is_its_environment_and_not_worth_a_plain_restart(tmp_path, line):
    assert verdict(tmp_path, [line]) == ("infra.cloud_credentials_missing", "infrastructure", False, [])
