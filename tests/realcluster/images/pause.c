/* The pod sandbox's pause process for the node tier's registry.k8s.io/pause image (built by
 * tests/realcluster/images.py; no registry is reachable here). It does what the upstream
 * pause does: it holds the pod's namespaces open, sleeps in pause(), reaps any child
 * reparented to it (when it is the pod's PID 1 in a shared PID namespace), and exits 0 on
 * SIGINT or SIGTERM.
 *   gcc -static -O2 -o pause pause.c */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static void on_stop(int sig)
{
    (void)sig;
    _exit(0);
}

static void on_child(int sig)
{
    int saved = errno;
    (void)sig;
    while (waitpid(-1, NULL, WNOHANG) > 0) {
    }
    errno = saved;
}

int main(int argc, char **argv)
{
    struct sigaction sa;

    if (argc > 1 && (strcmp(argv[1], "-v") == 0 || strcmp(argv[1], "--version") == 0)) {
        puts("pause (hostpath-provisioner node tier)");
        return 0;
    }
    if (getpid() != 1)
        fprintf(stderr, "pause: warning: not PID 1\n");
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_stop;
    if (sigaction(SIGINT, &sa, NULL) < 0 || sigaction(SIGTERM, &sa, NULL) < 0) {
        perror("pause: sigaction");
        return 1;
    }
    sa.sa_handler = on_child;
    sa.sa_flags = SA_NOCLDSTOP | SA_RESTART;
    if (sigaction(SIGCHLD, &sa, NULL) < 0) {
        perror("pause: sigaction");
        return 1;
    }
    for (;;)
        pause();
}
