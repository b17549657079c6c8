"""A small Django 3.2 app for the tests: the rate-limit middleware in front
of every view, and a view calling a flaky dependency through resil.httpx.
Configured by the environment the test sets."""
import os

SECRET_KEY = "test"
DEBUG = False
ALLOWED_HOSTS = ["*"]
ROOT_URLCONF = "djapp.urls"
INSTALLED_APPS = []
DATABASES = {}
USE_TZ = True
MIDDLEWARE = [] if os.environ.get("DJAPP_NO_LIMIT") else ["resil.django.RateLimitMiddleware"]

# DJAPP_CLOCK_FILE: every worker on the manual clock in that file, which
# the test moves (resil.Resil.set_clock_file, a test facility)
RESIL = {"socket": os.environ["RESIL_SOCKET"], "clock_file": os.environ.get("DJAPP_CLOCK_FILE")}
RESIL_RATELIMIT = {
    "policy": "per-ip",
    "config": os.environ.get("DJAPP_LIMIT",
                             "limit.rate = 100/60s; limit.burst = 100; limit.keys = 1024"),
    "key": "ip",
}
RESIL_TRUSTED_PROXIES = ["127.0.0.1"]
