/// <reference path="../../../sandbox/tally.d.ts" />
// Pay money out of a wallet to an outside account. In this request's transaction it holds the
// money (PAYOUT_HOLD, on the PENDING layer) and asks for the payout (tools.payout, an http tool);
// the payout itself is sent only after this transaction commits, by the worker, and its outcome
// settles the hold (settle_payout) or releases it (release_payout). payout_id names the payout for
// good: the hold is posted under it, and a second payout_out with the same payout_id is refused,
// so one payout is asked for once however often a client retries.

const HELD = 'query($id: String!) { transactions(first: 1, where: {correlationId: $id}) { nodes { transactionId } } }';
const POST = 'mutation($i: TransactionInput!) { postTransaction(input: $i) { transactionId } }';

function run(event) {
  const { payout_id, account, amount, destination } = event.data;
  if (graphql(HELD, { id: payout_id }).transactions.nodes.length > 0)
    fail(
      `payout ${payout_id} was already asked for`,
      'A payout_id names one payout: read its hold and executions, or send a new payout with a new payout_id.',
      { retry: false },
    );
  try {
    graphql(POST, {
      i: { transactionId: payout_id, tranCode: 'PAYOUT_HOLD', params: { account, amount, payout_id } },
    });
  } catch (error) {
    if (error.code !== 'BALANCE_VELOCITY_EXCEEDED') throw error;
    fail(
      `insufficient funds: ${decimal(amount).toFixed(2)} cannot be held`,
      "A customer's accounts together may not go below zero (the overdraft guard): pay out less.",
      { retry: false },
    );
  }
  // Recorded now, sent after the commit: what this gets back is the handle of the started call.
  const started = tools.payout({ payout_id, wallet: account, amount, currency: 'USD', destination });
  return { payout_id, execution_id: started.executionId, status: started.status };
}
