from django.urls import path

from . import views

urlpatterns = [
    path("reserve/<str:item>", views.reserve),
    path("signup/<str:user>", views.signup),
]
