"""salesrank for django-oscar: every order line sent exactly once, the catalogue kept in step, badges."""
