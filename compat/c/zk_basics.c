/*
 * ZooKeeper's C client (Debian's libzookeeper-mt, 3.8) against Warden's
 * ZooKeeper port: the everyday calls, each checked, one line per check.
 *
 *   gcc -o zk_basics zk_basics.c -lzookeeper_mt
 *   ./zk_basics HOST:PORT[,HOST:PORT...]
 *
 * Prints `PASS name: detail` or `FAIL name: detail` per check and exits 1
 * if any failed (2 on bad usage or no connection). It works under its own
 * root, /c-compat-PID, and removes it at the end.
 */
/* The synchronous calls are declared for the multi-threaded library only. */
#define THREADED
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <zookeeper/zookeeper.h>

/* Deadline for any one wait on the server. */
#define STEP_SECONDS 30

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t changed = PTHREAD_COND_INITIALIZER;
static int connected;
static int sessions_lost;
/* Watch events seen, in order: type and path. */
#define EVENTS_MAX 16
static int event_types[EVENTS_MAX];
static char event_paths[EVENTS_MAX][256];
static int events;
static int failures;

static void result(int ok, const char *name, const char *fmt, ...) {
    va_list ap;
    printf("%s %s: ", ok ? "PASS" : "FAIL", name);
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    printf("\n");
    fflush(stdout);
    if (!ok) failures++;
}

/* The session watcher: connection states, and every watch event. */
static void watcher(zhandle_t *zh, int type, int state, const char *path, void *ctx) {
    (void)zh;
    (void)ctx;
    pthread_mutex_lock(&lock);
    if (type == ZOO_SESSION_EVENT) {
        if (state == ZOO_CONNECTED_STATE) connected = 1;
        else if (state == ZOO_EXPIRED_SESSION_STATE || state == ZOO_AUTH_FAILED_STATE) sessions_lost++;
        else connected = 0;
    } else if (events < EVENTS_MAX) {
        event_types[events] = type;
        snprintf(event_paths[events], sizeof event_paths[events], "%s", path ? path : "");
        events++;
    }
    pthread_cond_broadcast(&changed);
    pthread_mutex_unlock(&lock);
}

static struct timespec deadline(void) {
    struct timespec t;
    clock_gettime(CLOCK_REALTIME, &t);
    t.tv_sec += STEP_SECONDS;
    return t;
}

/* Waits until `*flag >= want` (under the lock), with the step deadline. */
static int wait_for(int *flag, int want) {
    struct timespec until = deadline();
    int ok = 1;
    pthread_mutex_lock(&lock);
    while (*flag < want) {
        if (pthread_cond_timedwait(&changed, &lock, &until) == ETIMEDOUT) {
            ok = *flag >= want;
            break;
        }
    }
    pthread_mutex_unlock(&lock);
    return ok;
}

static const char *event_name(int type) {
    if (type == ZOO_CREATED_EVENT) return "created";
    if (type == ZOO_DELETED_EVENT) return "deleted";
    if (type == ZOO_CHANGED_EVENT) return "changed";
    if (type == ZOO_CHILD_EVENT) return "child";
    return "other";
}

/* Checks that watch event number `i` is `type` on `path`. */
static void expect_event(const char *name, int i, int type, const char *path) {
    if (!wait_for(&events, i + 1)) {
        result(0, name, "no %s event on %s within %d s", event_name(type), path, STEP_SECONDS);
        return;
    }
    pthread_mutex_lock(&lock);
    int ok = event_types[i] == type && strcmp(event_paths[i], path) == 0;
    result(ok, name, "%s %s (expected %s %s)", event_name(event_types[i]), event_paths[i],
           event_name(type), path);
    pthread_mutex_unlock(&lock);
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: %s HOST:PORT[,HOST:PORT...]\n", argv[0]);
        return 2;
    }
    zoo_set_debug_level(ZOO_LOG_LEVEL_WARN);
    zhandle_t *zh = zookeeper_init(argv[1], watcher, 10000, NULL, NULL, 0);
    if (!zh || !wait_for(&connected, 1)) {
        fprintf(stderr, "could not connect to %s within %d s\n", argv[1], STEP_SECONDS);
        return 2;
    }
    result(1, "connect", "session 0x%llx, timeout %d ms",
           (unsigned long long)zoo_client_id(zh)->client_id, zoo_recv_timeout(zh));

    char root[64], child[128], path[256], buf[256];
    snprintf(root, sizeof root, "/c-compat-%d", (int)getpid());
    snprintf(child, sizeof child, "%s/child", root);
    int rc, len;
    struct Stat stat;

    /* create, and create again: NodeExists. */
    rc = zoo_create(zh, root, "hello", 5, &ZOO_OPEN_ACL_UNSAFE, 0, path, sizeof path);
    result(rc == ZOK && strcmp(path, root) == 0, "create", "%s -> %s (%s)", root, path, zerror(rc));
    rc = zoo_create(zh, root, "x", 1, &ZOO_OPEN_ACL_UNSAFE, 0, NULL, 0);
    result(rc == ZNODEEXISTS, "create existing", "%s", zerror(rc));

    /* get: the data and its Stat. */
    len = sizeof buf;
    rc = zoo_get(zh, root, 0, buf, &len, &stat);
    result(rc == ZOK && len == 5 && memcmp(buf, "hello", 5) == 0 && stat.version == 0 && stat.dataLength == 5,
           "get", "%.*s, version %d, dataLength %d (%s)", len < 0 ? 0 : len, buf, stat.version,
           stat.dataLength, zerror(rc));

    /* A data watch, then set: the version moves and the watch fires. */
    len = sizeof buf;
    rc = zoo_get(zh, root, 1, buf, &len, &stat);
    result(rc == ZOK, "get with watch", "%s", zerror(rc));
    rc = zoo_set(zh, root, "world", 5, 0);
    result(rc == ZOK, "set", "version 0 -> 1 (%s)", zerror(rc));
    expect_event("data watch", 0, ZOO_CHANGED_EVENT, root);
    rc = zoo_set(zh, root, "stale", 5, 0);
    result(rc == ZBADVERSION, "set with a stale version", "%s", zerror(rc));
    len = sizeof buf;
    rc = zoo_get(zh, root, 0, buf, &len, &stat);
    result(rc == ZOK && len == 5 && memcmp(buf, "world", 5) == 0 && stat.version == 1, "get after set",
           "%.*s, version %d (%s)", len < 0 ? 0 : len, buf, stat.version, zerror(rc));

    /* A child watch (ls), then children: sequential and ephemeral. */
    struct String_vector kids;
    rc = zoo_get_children(zh, root, 1, &kids);
    result(rc == ZOK && kids.count == 0, "ls (empty) with watch", "%d children (%s)", kids.count, zerror(rc));
    deallocate_String_vector(&kids);
    rc = zoo_create(zh, child, "", 0, &ZOO_OPEN_ACL_UNSAFE, ZOO_EPHEMERAL | ZOO_SEQUENCE, path, sizeof path);
    result(rc == ZOK && strncmp(path, child, strlen(child)) == 0 && strlen(path) == strlen(child) + 10,
           "create ephemeral sequential", "%s (%s)", path, zerror(rc));
    expect_event("child watch", 1, ZOO_CHILD_EVENT, root);
    rc = zoo_exists(zh, path, 0, &stat);
    result(rc == ZOK && stat.ephemeralOwner == zoo_client_id(zh)->client_id, "exists (ephemeral owner)",
           "owner 0x%llx (%s)", (unsigned long long)stat.ephemeralOwner, zerror(rc));
    rc = zoo_get_children(zh, root, 0, &kids);
    result(rc == ZOK && kids.count == 1 && strncmp(kids.data[0], "child", 5) == 0, "ls", "%d: %s (%s)",
           kids.count, kids.count > 0 ? kids.data[0] : "", zerror(rc));
    deallocate_String_vector(&kids);

    /* exists on a missing node, with a watch: its creation fires it. */
    char later[160];
    snprintf(later, sizeof later, "%s/later", root);
    rc = zoo_exists(zh, later, 1, &stat);
    result(rc == ZNONODE, "exists (missing) with watch", "%s", zerror(rc));
    rc = zoo_create(zh, later, NULL, -1, &ZOO_OPEN_ACL_UNSAFE, 0, NULL, 0);
    result(rc == ZOK, "create with null data", "%s", zerror(rc));
    expect_event("exists watch", 2, ZOO_CREATED_EVENT, later);
    len = sizeof buf;
    rc = zoo_get(zh, later, 0, buf, &len, &stat);
    result(rc == ZOK && len == -1, "get null data", "length %d (%s)", len, zerror(rc));

    /* delete: NotEmpty with children, BadVersion, then the real thing. */
    rc = zoo_delete(zh, root, -1);
    result(rc == ZNOTEMPTY, "delete non-empty", "%s", zerror(rc));
    rc = zoo_wexists(zh, later, watcher, NULL, &stat);
    rc = zoo_delete(zh, later, 5);
    result(rc == ZBADVERSION, "delete with a wrong version", "%s", zerror(rc));
    rc = zoo_delete(zh, later, 0);
    result(rc == ZOK, "delete", "%s", zerror(rc));
    expect_event("delete watch", 3, ZOO_DELETED_EVENT, later);

    /* multi: a create and a set in one, then one with a failing check. */
    char m1[160];
    snprintf(m1, sizeof m1, "%s/multi", root);
    zoo_op_t ops[2];
    zoo_op_result_t results[2];
    zoo_create_op_init(&ops[0], m1, "m", 1, &ZOO_OPEN_ACL_UNSAFE, 0, NULL, 0);
    zoo_set_op_init(&ops[1], root, "multi", 5, 1, NULL);
    rc = zoo_multi(zh, 2, ops, results);
    result(rc == ZOK && results[0].err == ZOK && results[1].err == ZOK, "multi", "%s", zerror(rc));
    char m2[160];
    snprintf(m2, sizeof m2, "%s/never", root);
    zoo_create_op_init(&ops[0], m2, "m", 1, &ZOO_OPEN_ACL_UNSAFE, 0, NULL, 0);
    zoo_check_op_init(&ops[1], root, 99);
    rc = zoo_multi(zh, 2, ops, results);
    int gone = zoo_exists(zh, m2, 0, &stat) == ZNONODE;
    result(rc == ZBADVERSION && results[1].err == ZBADVERSION && gone, "multi rolled back", "%s, %s",
           zerror(rc), gone ? "its create undone" : "its create stayed");

    /* digest auth and an ACL only that identity may read. */
    rc = zoo_add_auth(zh, "digest", "carol:carol-pw", 14, NULL, NULL);
    char secret[160];
    snprintf(secret, sizeof secret, "%s/secret", root);
    struct ACL creator[1];
    creator[0].perms = ZOO_PERM_ALL;
    creator[0].id = ZOO_AUTH_IDS;
    struct ACL_vector mine = {1, creator};
    rc = zoo_create(zh, secret, "s", 1, &mine, 0, NULL, 0);
    struct ACL_vector acl;
    int got_acl = zoo_get_acl(zh, secret, &acl, &stat);
    int digest = got_acl == ZOK && acl.count == 1 && strcmp(acl.data[0].id.scheme, "digest") == 0 &&
                 strncmp(acl.data[0].id.id, "carol:", 6) == 0;
    result(rc == ZOK && digest, "auth digest + creator ACL", "%s, acl %s:%s", zerror(rc),
           got_acl == ZOK && acl.count > 0 ? acl.data[0].id.scheme : "?",
           got_acl == ZOK && acl.count > 0 ? acl.data[0].id.id : "?");
    if (got_acl == ZOK) deallocate_ACL_vector(&acl);

    /* getConfig: /zookeeper/config in the dynamic-config format. */
    len = sizeof buf - 1;
    rc = zoo_getconfig(zh, 0, buf, &len, &stat);
    if (len < 0) len = 0;
    buf[len] = 0;
    result(rc == ZOK && strncmp(buf, "server.", 7) == 0 && strstr(buf, "version=") != NULL, "getconfig",
           "%d bytes (%s)", len, zerror(rc));

    /* Clean up: children first. */
    zoo_delete(zh, secret, -1);
    zoo_delete(zh, m1, -1);
    rc = zoo_get_children(zh, root, 0, &kids);
    for (int i = 0; rc == ZOK && i < kids.count; i++) {
        snprintf(path, sizeof path, "%s/%s", root, kids.data[i]);
        zoo_delete(zh, path, -1);
    }
    if (rc == ZOK) deallocate_String_vector(&kids);
    rc = zoo_delete(zh, root, -1);
    result(rc == ZOK, "delete the root", "%s", zerror(rc));

    pthread_mutex_lock(&lock);
    int lost = sessions_lost;
    pthread_mutex_unlock(&lock);
    result(lost == 0, "session kept", "%d expiries or auth failures", lost);
    zookeeper_close(zh);
    printf("%s\n", failures ? "FAILED" : "ALL PASS");
    return failures ? 1 : 0;
}
