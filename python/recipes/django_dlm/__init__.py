"""Recipe: dlm in a Django project (an app to add to INSTALLED_APPS).

- ``dlm_setup``: one dlm.Client per process (created on first use, so that a
  server that forks its workers creates it after the fork), and the task
  functions of the ``emails`` queue;
- ``views.reserve``: a view that holds a lock while it works (409 when the
  item is being reserved elsewhere);
- ``python manage.py dlm_worker``: the worker, a management command.

Settings: ``DLM_REDIS_URL`` (e.g. "redis://127.0.0.1:6379").
Tested by python/tests/test_recipes.py with minimal settings.
"""
