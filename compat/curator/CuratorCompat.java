// Apache Curator's recipes against a Warden cluster, through Warden's
// ZooKeeper port, with the Curator and ZooKeeper client jars Debian ships
// (libcurator-recipes-java 5.4, libzookeeper-java 3.8). Nothing here knows
// it talks to Warden: it is what a Curator user would write.
//
//   javac -d OUT -cp JARS compat/curator/*.java
//   java -cp OUT:JARS warden.compat.CuratorCompat HOST:PORT,... [--no-kill]
//
// Prints one line per recipe, `PASS name: detail` or `FAIL name: detail`,
// and exits 1 if any failed. Every recipe except the last must run without
// any client losing its connection (a dropped connection is a failure: that
// is how a reply the Java client cannot parse shows up).
//
// The last recipe holds an InterProcessMutex (with a second client queued
// behind it) and runs two LeaderLatches, prints `KILL-LEADER`, and waits for
// one line on stdin, `killed HOST:PORT` (the ZooKeeper address of the
// process the driver killed with SIGKILL: the Raft leader). Then it checks
// the recipes recovered: the holder still holds (its session survived),
// the queued client gets the lock once released, and exactly one latch
// leads. `--no-kill` leaves that recipe out.
//
// Files: this one runs the recipes and prints their lines; Recipes.java
// holds the checks, LeaderKill.java the kill-9 one, Support.java what they
// share.

package warden.compat;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collections;
import java.util.List;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import org.apache.curator.framework.CuratorFramework;

import static warden.compat.Support.*;

public final class CuratorCompat {
    /** Deadline for a whole recipe. */
    static final long RECIPE_MS = 90_000;
    static final List<String> failed = Collections.synchronizedList(new ArrayList<>());

    interface Recipe {
        String run() throws Exception;
    }

    public static void main(String[] args) throws Exception {
        List<String> rest = new ArrayList<>(Arrays.asList(args));
        boolean kill = !rest.remove("--no-kill");
        hosts = rest.isEmpty() ? System.getenv("WARDEN_ZK_HOSTS") : rest.get(0);
        if (hosts == null || hosts.isEmpty()) {
            System.err.println("usage: CuratorCompat HOST:PORT,... [--no-kill]");
            System.exit(2);
        }
        CuratorFramework a = client("a");
        CuratorFramework b = client("b");
        recipe("getConfig + EnsembleTracker", () -> Recipes.ensemble(a));
        recipe("InterProcessMutex", () -> Recipes.mutex(a, b));
        recipe("InterProcessReadWriteLock", () -> Recipes.readWriteLock(a, b));
        recipe("InterProcessSemaphoreV2", () -> Recipes.semaphore(a, b));
        recipe("LeaderLatch", () -> Recipes.leaderLatch(a, b));
        recipe("LeaderSelector", () -> Recipes.leaderSelector(a, b));
        recipe("DistributedBarrier", () -> Recipes.barrier(a, b));
        recipe("DistributedDoubleBarrier", () -> Recipes.doubleBarrier(a, b));
        recipe("DistributedAtomicLong", () -> Recipes.atomicLong(a, b));
        recipe("CuratorCache", () -> Recipes.curatorCache(a, b));
        recipe("NodeCache", () -> Recipes.nodeCache(a, b));
        recipe("PersistentNode", () -> Recipes.persistentNode(a, b));
        recipe("transaction", () -> Recipes.transaction(a, b));
        recipe("SharedCount", () -> Recipes.sharedCount(a, b));
        recipe("DistributedQueue", () -> Recipes.queue(a, b));
        recipe("GroupMember", () -> Recipes.groupMember(a, b));
        recipe("PersistentTtlNode", () -> Recipes.persistentTtlNode(a, b));
        if (kill) {
            recipe("leader kill -9: InterProcessMutex + LeaderLatch", () -> LeaderKill.acrossLeaderKill(b));
        }
        for (CuratorFramework c : clients) {
            c.close();
        }
        System.out.println(failed.isEmpty() ? "ALL PASS" : "FAILED: " + String.join(", ", failed));
        System.out.flush();
        System.exit(failed.isEmpty() ? 0 : 1);
    }

    /**
     * Runs one recipe with a deadline and prints its line. A recipe in
     * which any client's connection was suspended or lost fails, unless it
     * is the leader-kill one (which causes exactly that).
     */
    static void recipe(String name, Recipe body) {
        int troublesBefore = troubles.size();
        String line;
        boolean ok;
        Future<String> run = pool.submit(body::run);
        try {
            String detail = run.get(RECIPE_MS, TimeUnit.MILLISECONDS);
            List<String> seen = new ArrayList<>(troubles.subList(troublesBefore, troubles.size()));
            ok = seen.isEmpty() || name.startsWith("leader kill");
            line = ok ? detail : "connection trouble during the recipe " + seen + " (" + detail + ")";
        } catch (TimeoutException e) {
            run.cancel(true);
            ok = false;
            line = "no result within " + RECIPE_MS + " ms";
        } catch (Exception e) {
            Throwable cause = e.getCause() != null ? e.getCause() : e;
            ok = false;
            line = cause.toString();
        }
        if (!ok) {
            failed.add(name);
        }
        System.out.println((ok ? "PASS " : "FAIL ") + name + ": " + line);
        System.out.flush();
    }
}
