"""A minimal Django 3.2 project for tern (ASGI and WSGI):

    cd examples/python
    python -m tern djangosite.asgi:application --port 8000
    python -m tern djangosite.wsgi:application --port 8000
"""
SECRET_KEY = "tern-example-not-secret"
DEBUG = False
ALLOWED_HOSTS = ["*"]
ROOT_URLCONF = "djangosite.urls"
INSTALLED_APPS = ["django.contrib.contenttypes"]
MIDDLEWARE = ["django.middleware.common.CommonMiddleware"]
DATABASES = {}
USE_TZ = True
DEFAULT_AUTO_FIELD = "django.db.models.AutoField"
