/* The observer/agent pattern with RRefs (the seed's RL tutorial): the agent
 * (rank 0) creates one observer on every other worker with remote() and
 * keeps only RRefs to them; it also puts its own state behind an RRef and
 * shares it with every observer.  Each episode the agent asks every
 * observer, through the observer's RRef, to run an episode; the observer
 * steps a small deterministic environment and asks the agent for each action
 * through the agent's RRef (a call from the owner's user back to the owner).
 * The agent then nudges its policy towards the better action.
 *   spmdrun --standalone --nproc-per-node 3 rpc_rl [--episodes N]
 * Checks: every observer's reward, recomputed by the agent from the actions
 * it chose, matches; the mean reward goes up. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "spmd/rpc.h"

enum { STEPS = 10 };

/* Observer value: {position}.  Agent value: {weight, bias, calls}. */
static spmd_status observer_new(spmd_rpc_call *c, void *ctx) {
    (void)ctx;
    int64_t one = 1;
    float pos = (float)spmd_rpc_rank(spmd_rpc_call_agent(c));
    return spmd_rpc_msg_add_tensor(spmd_rpc_call_result(c), SPMD_F32, 1, &one, &pos);
}

static spmd_status agent_new(spmd_rpc_call *c, void *ctx) {
    (void)ctx;
    int64_t three = 3;
    float v[3] = {0.75f, 0.0f, 0};   /* starts by stepping away from 0 */
    return spmd_rpc_msg_add_tensor(spmd_rpc_call_result(c), SPMD_F32, 1, &three, v);
}

/* On the agent, through its RRef: action = +1 if w*state + b > 0, else -1. */
static spmd_status select_action(spmd_rpc_call *c, void *ctx) {
    (void)ctx;
    float *p = spmd_rpc_msg_tensor(spmd_rpc_call_rref_value(c), 0)->data;
    float s = *(float *)spmd_rpc_msg_tensor(spmd_rpc_call_args(c), 0)->data;
    float a = p[0] * s + p[1] > 0 ? 1.0f : -1.0f;
    p[2] += 1;
    int64_t one = 1;
    return spmd_rpc_msg_add_tensor(spmd_rpc_call_result(c), SPMD_F32, 1, &one, &a);
}

/* On an observer, through its RRef: run one episode, asking the agent
 * (whose RRef comes in the message) for each action.  Reward: -|position|
 * summed, so moving towards 0 is good.  Returns {reward, actions...}. */
static spmd_status run_episode(spmd_rpc_call *c, void *ctx) {
    (void)ctx;
    float *pos = spmd_rpc_msg_tensor(spmd_rpc_call_rref_value(c), 0)->data;
    spmd_rref *agent = NULL;
    if (spmd_rpc_msg_take_rref(spmd_rpc_call_args_mut(c), 0, &agent) != SPMD_OK)
        return spmd_rpc_call_fail(c, "run_episode needs the agent's RRef");
    float out[1 + STEPS], reward = 0;
    spmd_status st = SPMD_OK;
    *pos = (float)spmd_rpc_rank(spmd_rpc_call_agent(c)) * 2.0f;   /* reset */
    for (int t = 0; t < STEPS && st == SPMD_OK; t++) {
        spmd_rpc_msg *m = spmd_rpc_msg_new(), *res = NULL;
        int64_t one = 1;
        spmd_rpc_msg_add_tensor(m, SPMD_F32, 1, &one, pos);
        spmd_rpc_future *f = NULL;
        st = spmd_rref_call_async(agent, "select_action", m, -1, &f);
        if (st == SPMD_OK) st = spmd_rpc_future_wait(f, -1);
        if (st == SPMD_OK) st = spmd_rpc_future_take(f, &res);
        if (st != SPMD_OK) spmd_rpc_call_fail(c, "asking the agent: %s", f ? spmd_rpc_future_errmsg(f) : "");
        if (st == SPMD_OK) {
            float a = *(float *)spmd_rpc_msg_tensor(res, 0)->data;
            out[1 + t] = a;
            *pos += a;
            reward -= fabsf(*pos);
        }
        spmd_rpc_future_free(f);
        spmd_rpc_msg_free(m);
        spmd_rpc_msg_free(res);
    }
    spmd_rref_release(agent);
    if (st != SPMD_OK) return st;
    out[0] = reward;
    int64_t n = 1 + STEPS;
    return spmd_rpc_msg_add_tensor(spmd_rpc_call_result(c), SPMD_F32, 1, &n, out);
}

int main(int argc, char **argv) {
    int episodes = 5;
    for (int i = 1; i + 1 < argc; i += 2)
        if (!strcmp(argv[i], "--episodes")) episodes = atoi(argv[i + 1]);
    char err[512];
    spmd_rpc *r = NULL;
    if (spmd_rpc_init_env(NULL, NULL, &r, err, sizeof err) != SPMD_OK) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    int rank = spmd_rpc_rank(r), world = spmd_rpc_world_size(r), rc = 0;
    spmd_rpc_register(r, "observer_new", observer_new, NULL, NULL);
    spmd_rpc_register(r, "agent_new", agent_new, NULL, NULL);
    spmd_rpc_register(r, "select_action", select_action, NULL, NULL);
    spmd_rpc_register(r, "run_episode", run_episode, NULL, NULL);
    spmd_barrier(spmd_rpc_group(r));
    if (rank == 0 && world > 1) {
        spmd_rref *agent = NULL, *obs[64];
        if (spmd_rpc_remote(r, 0, "agent_new", NULL, -1, &agent) != SPMD_OK) return 1;
        for (int o = 1; o < world; o++)
            if (spmd_rpc_remote(r, o, "observer_new", NULL, -1, &obs[o]) != SPMD_OK) return 1;
        float first = 0, last = 0;
        for (int ep = 0; ep < episodes && !rc; ep++) {
            spmd_rpc_future *fs[64];
            for (int o = 1; o < world; o++) {
                spmd_rpc_msg *m = spmd_rpc_msg_new();
                spmd_rpc_msg_add_rref(m, agent);   /* a new user of the agent for this episode */
                if (spmd_rref_call_async(obs[o], "run_episode", m, -1, &fs[o]) != SPMD_OK) rc = 1;
                spmd_rpc_msg_free(m);
            }
            float mean = 0;
            for (int o = 1; o < world && !rc; o++) {
                spmd_rpc_msg *res = NULL;
                if (spmd_rpc_future_wait(fs[o], -1) != SPMD_OK || spmd_rpc_future_take(fs[o], &res) != SPMD_OK) {
                    fprintf(stderr, "episode %d, observer %d: %s\n", ep, o, spmd_rpc_future_errmsg(fs[o]));
                    rc = 1;
                    break;
                }
                const float *v = spmd_rpc_msg_tensor(res, 0)->data;
                /* replay the episode from the actions: same reward */
                float pos = (float)o * 2.0f, reward = 0;
                for (int t = 0; t < STEPS; t++) reward -= fabsf(pos += v[1 + t]);
                if (reward != v[0]) rc = 1;
                mean += v[0] / (float)(world - 1);
                spmd_rpc_msg_free(res);
            }
            for (int o = 1; o < world; o++) spmd_rpc_future_free(fs[o]);
            /* policy improvement: move the decision boundary towards "step back to 0" */
            float *p = spmd_rpc_msg_tensor(spmd_rref_local_value(agent), 0)->data;
            p[0] -= 0.5f;
            if (ep == 0) first = mean;
            last = mean;
            printf("episode %d: mean reward %.1f\n", ep, mean);
        }
        if (!rc && episodes > 1 && !(last > first)) rc = 1;
        for (int o = 1; o < world; o++) spmd_rref_release(obs[o]);
        spmd_rref_release(agent);
    }
    if (spmd_rpc_shutdown(r, 1) != SPMD_OK) rc = 1;
    return rc;
}
