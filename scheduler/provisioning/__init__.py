"""The cloud backends' upkeep outside the tick: Kubernetes sync (``kubernetes``), TPU slices
(``tpu``), polled backends' reports (``sync``) and each backend's health (``health``)."""
