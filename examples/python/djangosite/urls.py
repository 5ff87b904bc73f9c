from django.http import HttpResponse, JsonResponse
from django.urls import path
from django.views.decorators.csrf import csrf_exempt


def index(request):
    return HttpResponse("Hello from Django on tern")


def info(request):
    return JsonResponse({"method": request.method,
                         "path": request.path,
                         "host": request.get_host(),
                         "secure": request.is_secure(),
                         "protocol": request.META.get("SERVER_PROTOCOL")})


@csrf_exempt
def echo(request):
    return JsonResponse({"length": len(request.body)})


urlpatterns = [path("", index), path("info", info), path("echo", echo)]
