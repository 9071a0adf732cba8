"""Top-level URLs: the console, the API and its schema, the Django admin."""

from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.http import HttpResponsePermanentRedirect
from django.templatetags.static import static
from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView

from scheduler.views import health

# The API first: Django tries the patterns in order, and the console's many would be tried (and
# their names collected for a 404) before every API call (about a tenth of a woken event
# watcher's CPU). No console pattern matches a path under api/.
urlpatterns = [
    path("api/v1/agent/", include("scheduler.api.agent")),
    path("api/v1/", include("scheduler.api.urls")),
    path("", include("scheduler.urls")),
    path("accounts/login/", auth_views.LoginView.as_view(), name="login"),
    path("accounts/logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("api/schema/", SpectacularAPIView.as_view(), name="schema"),
    path("api/docs/", SpectacularSwaggerView.as_view(url_name="schema"), name="api-docs"),
    path("admin/", admin.site.urls),
    # Browsers and tools ask for /favicon.ico whatever the page links: answer, not a 404 warning.
    path("favicon.ico", lambda request: HttpResponsePermanentRedirect(static("scheduler/favicon.svg")), name="favicon"),
    # For machines: probes and Prometheus (docs/observability.md).
    path("healthz", health.healthz, name="healthz"),
    path("readyz", health.readyz, name="readyz"),
    path("metrics", health.metrics_view, name="metrics"),
]

# JSON errors for /api/ paths no view answers; Django's own pages elsewhere.
handler404 = "scheduler.foundation.errors.handler404"
handler500 = "scheduler.foundation.errors.handler500"
